"""A matrix product and its marked bias add as eager's own ``torch.addmm``.

Why: Torch-MLIR lowers ``aten.addmm(b, x, w)`` (every ``nn.Linear`` with a bias) as a
``dot_general`` and an ``add`` of the broadcast bias. Eager hands the bias to MKL's
``gemm`` as the output it accumulates onto (``beta = 1``), which adds each block of a
long contraction onto it: from a contraction of 256 on, 30 to 60% of the float32
outputs differed from eager in the last bits (``decomp/fused_bias.py``).

Recognised at load time: an ``add`` of a two-dimensional ``dot_general`` (no batch
dims, one contracting dim on each side, operands and result of one float dtype) and the
bias ``decomp/fused_bias.py`` marked, as it is or broadcast
along the leading dims as torch broadcasts. The collapsed op calls ``torch.addmm`` on
the bias and the two operands in the layouts the ``dot_general`` reads them (a
``transpose`` before it is a view, as eager's ``w.t()``), so BLAS takes eager's path.
A product read by other ops too stays for them (``KEEP``): Torch-MLIR's CSE makes one
``dot_general`` of a linear layer's ``addmm`` and a plain ``x @ w.t()`` of the same
operands, and the add of that shared product was one rounding more than eager's
``addmm`` (113 of 384 float32 elements of ``(F.linear(x, w, b), F.linear(x, w))``).
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import OpFn, Runner, ints
from torchneuron.compiler.interpreter.collapse.base import Body, Collapsed, _Graph, _make
from torchneuron.compiler.stablehlo._dtypes import TORCH_DTYPES
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["addmm_with_bias", "KEEP"]

_MARK = "torchneuron.fused_bias"  # (decomp/fused_bias.py's FUSED_BIAS_TARGET)
KEEP = "keep"  # a Collapsed op's attribute: body indices of its run that stay in the body


def _plan(dot: Operation) -> OpFn | None:
    """The callable computing ``bias + a @ b`` from (a, b, bias), or None."""
    dn = dot.attributes["dot_dimension_numbers"]
    lc, rc = list(dn["lhs_contracting_dimensions"]), list(dn["rhs_contracting_dimensions"])
    dtypes = {TORCH_DTYPES.get(t.dtype) for t in (*dot.operand_types, *dot.result_types)}
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    if dtype is None or not dtype.is_floating_point or dn.get("lhs_batching_dimensions") \
            or dn.get("rhs_batching_dimensions") or len(lc) != 1 or len(rc) != 1 \
            or any(len(t.shape) != 2 for t in dot.operand_types):
        return None
    a_t, b_t = lc != [1], rc != [0]  # an operand read with its dims swapped

    def addmm(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        a, b, bias = args
        return [torch.addmm(bias, a.t() if a_t else a, b.t() if b_t else b)]

    return addmm


def _bias(g: _Graph, value: str, shape: list[int]) -> tuple[int | None, str] | None:
    """(the broadcast's body index or None, the marked bias) when ``value`` is the mark,
    as it is or broadcast as torch broadcasts it to ``shape``; else None."""
    bc = g.op(value, "stablehlo.broadcast_in_dim")
    at = None
    if bc is not None and len(bc[2]) == 1:
        rank = len(bc[1].operand_types[0].shape)
        if ints(bc[1], "broadcast_dimensions") != list(range(2 - rank, 2)):
            return None
        at, value = bc[0], bc[2][0]
    mark = g.op(value, "stablehlo.custom_call")
    if mark is None or mark[1].attributes.get("call_target_name") != _MARK:
        return None
    bias_shape = list(mark[1].result_types[0].shape)
    if len(bias_shape) > 2 or any(s not in (1, t) for s, t in zip(bias_shape[::-1], shape[::-1],
                                                                 strict=False)):
        return None
    return at, value


def addmm_with_bias(g: _Graph, body: Body, at: int) -> tuple[Collapsed, list[int]] | None:
    """The ``dot_general`` + marked bias ``add`` ending at ``body[at]`` as one op."""
    add, operands = body[at]
    if add.name != "stablehlo.add" or len(operands) != 2:
        return None
    shape = list(add.result_types[0].shape)
    for d, o in ((0, 1), (1, 0)):
        dot = g.op(operands[d], "stablehlo.dot_general")
        found = _bias(g, operands[o], shape) if dot is not None else None
        if found is None or len(dot[2]) != 2:
            continue
        impl = _plan(dot[1])
        if impl is None or dot[1].result_types[0].dtype != add.result_types[0].dtype:
            return None
        bc_at, bias = found
        ids = sorted([dot[0], at] + ([] if bc_at is None else [bc_at]))
        shared = not g.closed(body, ids, at)
        if shared and not g.closed(body, ids, at, also=(dot[0],)):
            return None
        outer = (dot[2][0], dot[2][1], bias)
        collapsed = _make(add, outer, [body[i] for i in ids], impl, "addmm_bias")
        if shared:  # the product is read elsewhere too: it stays for its other readers
            collapsed.attributes[KEEP] = [dot[0]]
        return collapsed, ids
    return None
