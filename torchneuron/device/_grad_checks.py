"""The device check PyTorch skips for tensor subclasses: a custom ``autograd.Function``
whose backward returns a gradient on the wrong device.

Why: the autograd engine validates every gradient's device against its input's
(``invalid gradient at index 0 - expected device cuda:0 but got cpu``), but skips
that check when the input is a tensor subclass, as every neuron tensor is. A backward
that returned a CPU gradient for a neuron input then left ``x.grad`` on the CPU,
silently. Custom Functions are where user code hands gradients to the engine
directly (built-in backwards run on the device), so their results are checked here
with the engine's own rule and message: a 0-dim gradient is moved to the expected
device, any other mismatch raises.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import BackwardCFunction

__all__ = ["install"]

_installed = False


def _checked(ctx: Any, result: Any) -> Any:
    grads = list(result) if isinstance(result, tuple) else [result]
    edges = iter(enumerate(ctx.next_functions))
    changed = False
    for i, needed in enumerate(ctx.needs_input_grad):
        if not needed:
            continue
        # inputs requiring grad are, in order, the edges that lead to a node
        index, (node, input_nr) = next((j, e) for j, e in edges if e[0] is not None)
        g = grads[i] if i < len(grads) else None
        if not isinstance(g, torch.Tensor):
            continue
        expected = node._input_metadata[input_nr].device
        if g.device == expected or "neuron" not in (g.device.type, expected.type):
            continue
        if g.dim() == 0:
            grads[i] = g.to(expected)
            changed = True
            continue
        raise RuntimeError(
            f"Function {ctx.name()} returned an invalid gradient at index {index} - "
            f"expected device {expected} but got {g.device}"
        )
    if not changed:
        return result
    return tuple(grads) if isinstance(result, tuple) else grads[0]


def install() -> None:
    """Check the devices of custom Functions' gradients (idempotent)."""
    global _installed
    if _installed:
        return
    apply, apply_boxed = BackwardCFunction.apply, BackwardCFunction.apply_boxed

    def checked_apply(self: Any, *args: Any) -> Any:
        return _checked(self, apply(self, *args))

    def checked_apply_boxed(self: Any, *args: Any) -> Any:
        return _checked(self, apply_boxed(self, *args))

    BackwardCFunction.apply = checked_apply  # type: ignore[method-assign]
    BackwardCFunction.apply_boxed = checked_apply_boxed  # type: ignore[method-assign]
    _installed = True
