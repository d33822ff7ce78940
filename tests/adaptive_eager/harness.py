"""Run one loop three ways (plain CPU, eager on the device, adaptive eager on the device)
with the same seeds, and compare everything it produced."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

import torchneuron.adaptive_eager as ae
from torchneuron.hardware import get_core
from torchneuron.hardware import reset as reset_cores


def to(x: Any, device: str) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to(v, device) for v in x)
    return x


def run(loop: Callable[[str], dict[str, Any]], device: str, adaptive: bool = False,
        seed: int = 0) -> dict[str, Any]:
    """``loop(device)`` returns named results; tensors come back on the CPU."""
    reset_cores()
    torch.manual_seed(seed)
    if adaptive:
        ae.enable()
    try:
        out = loop(device)
    finally:
        if adaptive:
            ae.disable()
    out = {k: to(v, "cpu") for k, v in out.items()}
    out["_ns"] = get_core(0).now if device == "neuron" else None
    return out


def assert_same(a: dict[str, Any], b: dict[str, Any], *, rtol: float = 1e-5,
                atol: float = 1e-6, exact: tuple[str, ...] = ()) -> None:
    for k, va in a.items():
        if k.startswith("_"):
            continue
        vb = b[k]
        if k in exact:
            torch.testing.assert_close(vb, va, rtol=0, atol=0, msg=f"{k} differs")
        else:
            torch.testing.assert_close(vb, va, rtol=rtol, atol=atol, msg=f"{k} differs")


def state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}


def clone_to(model: torch.nn.Module, device: str) -> torch.nn.Module:
    return copy.deepcopy(model).to(device)


def keep_step(out: dict[str, list[torch.Tensor]], loss: torch.Tensor,
              model: torch.nn.Module) -> None:
    """Append a training step's loss and every parameter's gradient to ``out``."""
    out.setdefault("loss", []).append(loss.detach().clone())
    for k, p in model.named_parameters():
        out.setdefault("grad." + k, []).append(p.grad.detach().clone())


def kept(out: dict[str, list[torch.Tensor]], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``keep_step``'s record stacked per name, with the model's final state."""
    result = {k: torch.stack(v) for k, v in out.items()}
    result.update({k: v.detach().clone() for k, v in model.state_dict().items()})
    return result


class ReplayLog:
    """Which steps replayed (the replay counter moved during the step); ``program_steps``:
    which replayed a compiled program (not only the first tier's recorded kernels)."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.program_steps: list[int] = []
        self._last = self._last_program = 0

    def mark(self, step: int) -> None:
        if ae.is_enabled():
            s = ae.stats()
            n, program = s["replays"], s["replays"] - s["first_tier_replays"]
        else:
            n, program = self._last, self._last_program
        if n > self._last:
            self.steps.append(step)
        if program > self._last_program:
            self.program_steps.append(step)
        self._last, self._last_program = n, program
