"""ModuleInfo under replay: ``tools/replay_sweep.py modules``.

Why apart: a module's sample is a training step (forward, the backward of the sum of its
outputs, buffers updated), built and read back differently from an op's sample; the step
under replay and its judge are ``tools/replay_steps.py``'s, shared with the ops.

Each sample: a float32 module in training mode, built once, copied to the device; one
copy runs the step eagerly (the reference), another runs it ``STEPS`` times under adaptive
eager from the same state (buffers restored, gradients cleared). The forward outputs, the
parameters and their gradients, the input gradients and the buffers after the step must
all have eager's bits (``replay_steps.judge``).
"""

from __future__ import annotations

import collections
import copy
from typing import Any

import torch
from moduleinfo_sweep import _Copier as _ModuleCopier
from moduleinfo_sweep import _select, _sum_of_outputs, find_modules
from moduleinfo_sweep import _tensors as _module_tensors
from opinfo_device import _first_line, _time_limit
from replay_steps import DEFAULT_SAMPLES, SEED, TOLERANCE, judge, under_replay, verdict_of

__all__ = ["check_module", "find_modules"]


def _module_results(module: torch.nn.Module, outs: Any, leaves: list[torch.Tensor],
                    ) -> dict[str, Any]:
    """Outputs, parameters and their gradients, buffers, input gradients: on the CPU."""
    with torch.no_grad():  # reads only (see _cpu)
        got: dict[str, Any] = {"out": [t.cpu() for t in _module_tensors(outs)]}
        for name, p in module.named_parameters():
            got[f"param {name}"] = p.cpu()
            got[f"grad {name}"] = None if p.grad is None else p.grad.cpu()
        for name, b in module.named_buffers():
            got[f"buffer {name}"] = b.cpu()
        for i, t in enumerate(leaves):
            got[f"input grad {i}"] = None if t.grad is None else t.grad.cpu()
    return got


def _module_step(module: torch.nn.Module, start: dict[str, torch.Tensor], inputs: Any,
                 leaves: list[torch.Tensor]) -> dict[str, Any]:
    """One training step from the same state: buffers restored, gradients cleared.

    The inputs are the same device leaves every step (gradients cleared): fresh copies
    would put ``requires_grad_`` (a boundary) into the step, a side exit of the harness.
    """
    with torch.no_grad():
        for name, b in module.named_buffers():
            b.copy_(start[name])
    for t in (*module.parameters(), *leaves):
        t.grad = None
    torch.manual_seed(SEED)
    outs = module(*inputs[0], **inputs[1])
    loss = _sum_of_outputs(_module_tensors(outs))
    if loss is not None:
        loss.backward()
    return _module_results(module, outs, leaves)


def _module_sample(info: Any, sample: Any) -> tuple[str, str] | None:
    torch.manual_seed(SEED)
    ctor = sample.constructor_input
    try:
        built = info.module_cls(*ctor.args, **ctor.kwargs).to(torch.float32)
        built.train(True)
        if any(isinstance(t, torch.nn.parameter.UninitializedTensorMixin)
               for t in (*built.parameters(), *built.buffers())):
            # a lazy module initializes on its first call; a copy of it on the device would
            # still hold CPU placeholders: initialize it once on the CPU, then copy
            args, kwargs = _ModuleCopier("cpu")(
                (sample.forward_input.args, sample.forward_input.kwargs))
            built(*args, **kwargs)
        dev = copy.deepcopy(built).to("neuron")
        on_device = _ModuleCopier("neuron")
        inputs = (on_device(sample.forward_input.args), on_device(sample.forward_input.kwargs))
        leaves = [y for _, y in on_device.leaves if y.requires_grad]
        start = {k: v.detach().clone() for k, v in dev.named_buffers()}
        eager_mod = copy.deepcopy(dev)
        want = _module_step(eager_mod, start, inputs, leaves)
    except Exception:  # noqa: BLE001 - a sample eager refuses is not the replay's
        return None
    replay_mod = copy.deepcopy(dev)

    def compare_step(i: int, got: dict[str, Any]) -> str | None:
        if got.keys() != want.keys():
            return f"results {sorted(got)} != eager's {sorted(want)}"
        for k, w in want.items():
            if (w is None) != (got[k] is None):
                return f"{k}: {'no ' if got[k] is None else ''}value, eager has " + \
                    ("none" if w is None else "one")
            bad = None if w is None else judge(w, got[k], TOLERANCE)
            if bad is not None:
                return f"{k}: {bad}"
        return None

    return under_replay(lambda i: _module_step(replay_mod, start, inputs, leaves),
                        compare_step)


def check_module(info: Any, samples: int = DEFAULT_SAMPLES, timeout: int = 0) -> dict[str, Any]:
    """Up to ``samples`` training-mode float32 samples of ``info`` under replay."""
    res: dict[str, Any] = {"name": info.name, "status": "skipped", "samples": {}, "first": {}}
    if torch.float32 not in info.supported_dtypes("cpu"):
        res["reason"] = "no float32"
        return res
    counts: collections.Counter[str] = collections.Counter()
    try:
        with _time_limit(timeout):
            torch.manual_seed(SEED)
            chosen = _select(list(info.module_inputs_func(
                info, device="cpu", dtype=torch.float32, requires_grad=True, training=True)),
                samples)
            for i, sample in enumerate(chosen):
                got = _module_sample(info, sample)
                if got is None:
                    continue
                counts[got[0]] += 1
                res["first"].setdefault(got[0], f"#{i} ({sample.desc or 'default'}): {got[1]}")
    except Exception as e:  # noqa: BLE001 - never let one module stop the sweep
        counts["ERROR"] += 1
        res["first"].setdefault("ERROR", f"harness: {_first_line(e)}")
    res["samples"] = dict(counts)
    res["status"] = verdict_of(counts)
    return res
