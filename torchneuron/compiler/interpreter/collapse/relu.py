"""Load-time fusion of ReLU's backward: ``select(x <= t, 0, g)`` as one torch call.

Why: ReLU's gradient lowers to a ``compare`` of the saved activation with a splat
threshold (``LE``) and a ``select`` of a splat zero or the incoming gradient. On the
zoo's training loops each is a full-size step: the compare allocates a mask, and the
select (even in ``_specialize_math``'s bit form) reads three tensors; together about
five times ``aten.threshold_backward``, which computes exactly
``where(x <= t, 0, g)`` in one pass (the eager device's own ReLU backward).

Same bits: ``threshold_backward`` compares in the tensors' dtype (the threshold is the
constant's own value, exactly representable) and writes ``+0.0`` where the compare
holds, the gradient's own bits elsewhere; a NaN activation fails ``<=`` in both. The
run is fused only when the threshold and zero operands are program constants (made in
the block from constants only, so the interpreter keeps them: the same tensors, never
written, on every run); a runtime input there could be written in place between runs.
They are checked by value on the first run and the check is kept for those tensors: a
threshold that is not one value, or a "zero" that is not ``+0.0`` everywhere, runs the
original two ops.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import OpFn, Runner
from torchneuron.compiler.interpreter._specialize_math import SAME_WIDTH_INT
from torchneuron.compiler.interpreter.collapse.base import _fallback, _make
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["relu_backward"]

_DTYPES = {"f32": torch.float32, "f64": torch.float64}  # the dtypes fused
_threshold_backward = torch.ops.aten.threshold_backward.default


def fusible_pair(g: Any, body: Any, at: int, cmp: Any, sel: Operation,
                 directions: tuple[str, ...], constants: tuple[Any, ...]) -> list[int] | None:
    """The op ids of a ``compare`` + ``select`` pair one kernel may replace (float32 /
    float64, one shape throughout, a float compare in ``directions``, ``constants``
    program constants, nothing else reading the compare), or None."""
    c_op = cmp[1]
    out_t = sel.result_types[0]
    shape = tuple(out_t.shape)
    if (
        c_op.attributes.get("comparison_direction") not in directions
        or c_op.attributes.get("compare_type", "FLOAT") not in ("FLOAT", "NOTYPE")
        or out_t.dtype not in _DTYPES or not all(s >= 0 for s in shape)
        or any(t.dtype != out_t.dtype or tuple(t.shape) != shape
               for t in (*c_op.operand_types, *sel.operand_types[1:]))
        or tuple(sel.operand_types[0].shape) != shape
        or not all(g.constant(v) for v in constants)
    ):  # fmt: skip
        return None
    run_ids = sorted({cmp[0], at})
    return run_ids if g.closed(body, run_ids, at) else None


def relu_backward(g: Any, body: Any, at: int) -> tuple[Any, list[int]] | None:
    """The ``compare`` + ``select`` run ending at ``body[at]`` as one fused op."""
    sel, operands = body[at]
    if sel.name != "stablehlo.select" or len(operands) != 3:
        return None
    cmp = g.op(operands[0], "stablehlo.compare")
    if cmp is None or len(cmp[2]) != 2:
        return None
    out_t = sel.result_types[0]
    run_ids = fusible_pair(g, body, at, cmp, sel, ("LE",), (cmp[2][1], operands[1]))
    if run_ids is None:
        return None  # a threshold or zero read at run time: checked once, it could go stale
    run_ops = [body[i] for i in run_ids]
    outer = (cmp[2][0], cmp[2][1], operands[1], operands[2])
    impl = _threshold(SAME_WIDTH_INT[_DTYPES[out_t.dtype].itemsize], _fallback(run_ops, outer))
    return _make(sel, outer, run_ops, impl, "relu_backward"), run_ids


def _threshold(itype: torch.dtype, slow: OpFn) -> OpFn:
    """The fused callable of ``relu_backward``."""
    checked: list[Any] = [None, None]  # [the constants last checked, their threshold or None]

    def threshold(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x, t, zero, grad = args
        if checked[0] is None or checked[0][0] is not t or checked[0][1] is not zero:
            th = None
            if t.numel() and t.dtype == x.dtype and zero.dtype == x.dtype:
                first = t.reshape(-1)[0]
                if bool((t == first).all()) and not bool(zero.view(itype).any()):
                    th = float(first)
            checked[:] = [(t, zero), th]
        th = checked[1]
        if th is None or x.dtype != grad.dtype or x.shape != grad.shape:
            return slow(op, args, run)
        return [_threshold_backward(grad, x, th)]

    return threshold
