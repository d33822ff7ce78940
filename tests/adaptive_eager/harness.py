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
from torchneuron.hardware.settings import override


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


def sgd_loop(model: torch.nn.Module, input_shape: tuple[int, ...], steps: int,
             log: ReplayLog | None = None) -> Callable[[str], dict[str, torch.Tensor]]:
    """A training loop on ``device``: a copy of ``model``, a random input of
    ``input_shape`` per step, the squared mean as the loss, a hand-written SGD update (no
    optimizer's foreach ops), every step's loss and parameters kept."""

    def loop(device: str) -> dict[str, torch.Tensor]:
        m = copy.deepcopy(model).to(device)
        g = torch.Generator().manual_seed(1)
        out: dict[str, list[torch.Tensor]] = {}
        for step in range(steps):
            x = torch.randn(*input_shape, generator=g).to(device)
            for p in m.parameters():
                p.grad = None
            loss = m(x).square().mean()
            loss.backward()
            with torch.no_grad():
                for p in m.parameters():
                    p -= 0.1 * p.grad
            loss.item()
            keep_step(out, loss, m)
            if log is not None:
                log.mark(step)
        return kept(out, m)
    return loop


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


# Settings under which a loop's region replays its compiled program as soon as it can:
# no modeled compile latency, no first tier (the recorded kernels issued while compiling),
# any predicted gain enough.
REPLAY_AT_ONCE = {"compile_latency": False, "ae_first_tier": False, "ae_min_gain_ns": 0}


def bits_differing(want: dict[str, Any], got: dict[str, Any]) -> dict[str, str]:
    """Each named tensor of ``want`` that ``got`` does not equal bit for bit, with how
    many of its elements differ (names starting with ``_`` are not results)."""
    return {k: f"{int((got[k] != v).sum())} of {v.numel()}" for k, v in want.items()
            if not k.startswith("_") and not torch.equal(got[k], v)}


def assert_replays_eagers_bits(loop: Callable[[ReplayLog | None], Callable[[str], dict[str, Any]]],
                               settings: dict[str, Any] | None = None,
                               no_divergence: bool = False) -> None:
    """``loop(None)`` on plain CPU and ``loop(log)`` under adaptive eager on the device
    (with ``settings``, ``REPLAY_AT_ONCE`` by default): some step replayed a compiled
    program, every result is the CPU's bit for bit and, with ``no_divergence``, no region
    was blacklisted (a checked replay that differed runs eagerly, with eager's bits)."""
    cpu = run(loop(None), "cpu")
    log = ReplayLog()

    def adaptive(device: str) -> dict[str, Any]:
        out = loop(log)(device)
        out["_blacklisted"] = ae.stats()["regions_by_state"].get("blacklisted", 0)
        return out

    with override(**(REPLAY_AT_ONCE if settings is None else settings)):
        got = run(adaptive, "neuron", adaptive=True)
    if no_divergence:
        assert got["_blacklisted"] == 0, "a region diverged from eager at its checked replay"
    assert log.program_steps, "no step replayed a compiled program"
    differ = bits_differing(cpu, got)
    assert not differ, f"replayed steps differ from eager CPU: {differ}"
