"""Load-time fusion of a normalization's variance: one step instead of eleven.

Why: BatchNorm's training forward and LayerNorm's forward lower the biased variance of
a float32 input ``x`` (over the batch and spatial dims, or the normalized trailing dims)
to eleven StableHLO ops, computed in float64 as eager PyTorch does::

    X = convert_f64(x); s = reduce_add(X, 0, dims); m = divide(reshape(s), N)
    d = subtract(X, broadcast(m)); q = reduce_add(multiply(d, d), 0, dims)
    var = convert_f32(divide(reshape(q), N))

On the zoo's training loops each is a step of the interpreter (with its lookups and
checks) on every training step, and four of them allocate a whole activation in
float64. Here the run is one fused op making the same torch calls in the same order
(``sum`` with ``keepdim`` instead of sum-then-reshape, implicit broadcasting instead of
the broadcast, in place on the fresh float64 copy): the same bits as the op-by-op run,
in about a quarter of its wall time. ``torch.var_mean`` was measured and rejected: its
Welford pass over non-leading dims is four times slower than the two sums, and it
accumulates in another order (not the same bits).

Only this exact form is fused: a float widened to float64 and rounded back to the
same dtype, the same reduced dims in both reduces, each sum's reshape and divisor in
the kept-dims shape, the deviation squared by itself, nothing else reading the run's
inner values. Anything else runs the original ops.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import OpFn, Runner, ints
from torchneuron.compiler.interpreter.collapse.base import _fallback, _make
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["batch_variance"]

_NARROW = ("f32", "f16", "bf16")


def batch_variance(g: Any, body: Any, at: int) -> tuple[Any, list[int]] | None:
    """The run ending at ``body[at]`` (a float64 -> narrow convert) as one fused op."""
    from torchneuron.compiler.interpreter._ops_reduce import simple_body
    cv_out, ops_out = body[at]
    if (
        cv_out.name != "stablehlo.convert" or len(ops_out) != 1
        or cv_out.operand_types[0].dtype != "f64" or cv_out.result_types[0].dtype not in _NARROW
    ):  # fmt: skip
        return None
    div2 = g.op(ops_out[0], "stablehlo.divide")
    if div2 is None:
        return None
    rs2 = g.op(div2[2][0], "stablehlo.reshape")
    if rs2 is None:
        return None
    red2 = g.op(rs2[2][0], "stablehlo.reduce")
    if red2 is None or len(red2[2]) != 2 or simple_body(red2[1]) != "stablehlo.add":
        return None
    mul = g.op(red2[2][0], "stablehlo.multiply")
    if mul is None or mul[2][0] != mul[2][1]:
        return None
    sub = g.op(mul[2][0], "stablehlo.subtract")
    if sub is None:
        return None
    bc = g.op(sub[2][1], "stablehlo.broadcast_in_dim")
    if bc is None:
        return None
    div1 = g.op(bc[2][0], "stablehlo.divide")
    if div1 is None:
        return None
    rs1 = g.op(div1[2][0], "stablehlo.reshape")
    if rs1 is None:
        return None
    red1 = g.op(rs1[2][0], "stablehlo.reduce")
    if red1 is None or len(red1[2]) != 2 or simple_body(red1[1]) != "stablehlo.add":
        return None
    wide = red1[2][0]
    cv_in = g.op(wide, "stablehlo.convert")
    if cv_in is None or sub[2][0] != wide:
        return None
    x_t, wide_t = cv_in[1].operand_types[0], cv_in[1].result_types[0]
    shape = tuple(wide_t.shape)
    rank = len(shape)
    dims = ints(red1[1], "dimensions")
    keep = tuple(1 if d in dims else s for d, s in enumerate(shape))
    if (
        x_t.dtype != cv_out.result_types[0].dtype or wide_t.dtype != "f64"
        or not all(s >= 0 for s in shape) or not dims or sorted(set(dims)) != sorted(dims)
        or ints(red2[1], "dimensions") != dims or tuple(rs1[1].result_types[0].shape) != keep
        or tuple(rs2[1].result_types[0].shape) != keep
        or tuple(div1[1].operand_types[1].shape) != keep
        or tuple(div2[1].operand_types[1].shape) != keep
        or tuple(bc[1].result_types[0].shape) != shape
        or ints(bc[1], "broadcast_dimensions") != list(range(rank))
        or tuple(cv_out.result_types[0].shape) != keep
    ):  # fmt: skip
        return None
    run_ids = sorted({cv_in[0], red1[0], rs1[0], div1[0], bc[0], sub[0], mul[0], red2[0],
                      rs2[0], div2[0], at})  # fmt: skip
    if len(run_ids) != 11 or not g.closed(body, run_ids, at):
        return None
    run_ops = [body[i] for i in run_ids]
    outer = (cv_in[2][0], red1[2][1], div1[2][1], red2[2][1], div2[2][1])
    impl = _var_mean(tuple(dims), _fallback(run_ops, outer))
    return _make(cv_out, outer, run_ops, impl, "batch_variance"), run_ids


def _var_mean(dims: tuple[int, ...], slow: OpFn) -> OpFn:
    """The fused callable of ``batch_variance``: the run's own torch calls, in order."""

    def variance(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x, init1, n1, init2, n2 = args
        if init1.dim() or init2.dim():
            return slow(op, args, run)
        wide = x.to(torch.float64, copy=True)  # fresh: the later steps work in place
        s = torch.sum(wide, dim=dims, dtype=wide.dtype, keepdim=True).add_(init1)
        d = wide.sub_(s.div_(n1))  # the reduce's sum plus init, over N, subtracted
        q = torch.sum(d.mul_(d), dim=dims, dtype=d.dtype, keepdim=True).add_(init2)
        return [q.div_(n2).to(x.dtype)]

    return variance
