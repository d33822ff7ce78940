"""Ops the compiler refuses whatever region holds them: learned once, then run eagerly
between regions.

A region holding an op with no lowering (GradScaler's ``_amp_update_scale_``) or one
the compiler cannot replay exactly (``multinomial`` drawing from probabilities the graph
computed) fails to compile, and so does every region that holds it again: the whole
step stays eager. The first such failure names the op (``CompileError.op`` with an
op-intrinsic ``reason``); from then on the runtime ends the segment before that op and
runs it eagerly, unrecorded, like a growing op (``growing``), so the ops on either side
of it form regions of their own that do compile. Eager runs the op itself, so the
numbers are eager's; only fusion across it is lost.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["RefusedOps"]

# Reasons that belong to the op, not to the region, its dtypes or the worker
_OP_REASONS = frozenset({
    "no-lowering", "random-op-with-tensor-values", "random-op-multi-output",
    "random-op-unsupported-arg", "random-op-layout", "dynamic-output-shape",
    "data-dependent",
})
_MAX_OPS = 16  # a bound, so that a compiler refusing everything cannot shatter the stream


def _overloads(op: str) -> list[Any]:
    """Every overload of aten op ``op`` ("aten.multinomial.default", "aten.hypot",
    "aten::x") and of its in-place / out-of-place twin: the compiler sees the functional
    op (``_amp_update_scale``) where the stream has the in-place one (``_amp_update_scale_``)."""
    parts = op.replace("::", ".").split(".")
    if len(parts) < 2 or parts[0] != "aten":
        return []
    name = parts[1]
    found = []
    for n in dict.fromkeys((name, name.rstrip("_"), name.rstrip("_") + "_")):
        packet = getattr(torch.ops.aten, n, None)
        if packet is None:
            continue
        found.extend(getattr(packet, o) for o in packet.overloads())
    return found


class RefusedOps:
    """Aten overloads to run between regions, each with the compiler's reason."""

    def __init__(self) -> None:
        self.ops: dict[Any, str] = {}  # overload -> "aten.x (reason)"

    def learn(self, err: BaseException) -> bool:
        """Learn the op a compile error blames, if the refusal is the op's own."""
        op, reason = getattr(err, "op", None), getattr(err, "reason", None)
        if not op or reason not in _OP_REASONS or len(self.ops) >= _MAX_OPS:
            return False
        funcs = [f for f in _overloads(str(op)) if f not in self.ops]
        for f in funcs:
            self.ops[f] = f"{op} ({reason})"
        return bool(funcs)

    def describe(self) -> dict[str, str]:
        """The compiler's op name -> its reason, one entry per refused op."""
        return {text.split(" (")[0]: text.split(" (", 1)[1][:-1] for text in self.ops.values()}
