"""Load-time specializations of ``dot_general`` and ``select``, the two hottest math ops.

Why: on the zoo's training loops ``dot_general`` is the op the interpreter spends most
time in (res_mlp, transformer_lm), nearly all of it Python: the generic implementation
re-reads its dimension numbers, rebuilds permutations and shapes and converts dtypes on
every call, about 13 µs around a 1-3 µs ``bmm``. ``select`` is torch's ``where``, whose
CPU kernel takes a data-dependent branch per element: on a random mask (ReLU's backward,
max-pooling's argmax mask) it costs ~3 ns per element beyond a few thousand elements,
10x an ``add``. Both are registered through ``_specialize.specializer`` and, as every
specialization, give exactly the generic implementation's bits:

- ``dot_general``: the same permute, reshape and ``bmm`` (or ``mm``) calls in the same dtype, with
  everything that depends only on the op's attributes and static shapes worked out once;
- ``select``: for large tensors with a mask that changes often, the choice made on the
  values' bit patterns (``b ^ ((a ^ b) & -pred)`` on integer views), which picks each
  element's own bits as ``where`` does, including NaN payloads and signed zeros; a mask
  broadcast along its inner dims keeps ``where`` (``_SELECT_RUN_MIN``).
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import OpFn, Runner
from torchneuron.compiler.interpreter._specialize import specializer
from torchneuron.compiler.stablehlo._dtypes import TORCH_DTYPES
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["select", "SAME_WIDTH_INT"]


def _prod(xs: list[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


@specializer("stablehlo.dot_general")
def _dot_general(op: Operation) -> OpFn | None:
    """Static shapes, float operands of the result's dtype: the generic path's permute,
    reshape and ``bmm``, with the permutations, shapes and identity checks done once."""
    from torchneuron.compiler.interpreter._ops_conv import dot_general as generic

    a_t, b_t = op.operand_types
    out = TORCH_DTYPES.get(op.result_types[0].dtype)
    if (
        out is None or not out.is_floating_point
        or TORCH_DTYPES.get(a_t.dtype) != out or TORCH_DTYPES.get(b_t.dtype) != out
        or not all(s >= 0 for s in (*a_t.shape, *b_t.shape))
    ):  # fmt: skip
        return None
    dn = op.attributes["dot_dimension_numbers"]
    lb = list(dn.get("lhs_batching_dimensions", []))
    rb = list(dn.get("rhs_batching_dimensions", []))
    lc, rc = list(dn["lhs_contracting_dimensions"]), list(dn["rhs_contracting_dimensions"])
    lf = [d for d in range(len(a_t.shape)) if d not in lb and d not in lc]
    rf = [d for d in range(len(b_t.shape)) if d not in rb and d not in rc]
    a_perm, b_perm = lb + lf + lc, rb + rc + rf
    a_id = a_perm == list(range(len(a_perm)))
    b_id = b_perm == list(range(len(b_perm)))
    bs = [a_t.shape[d] for d in lb]
    lfs, rfs = [a_t.shape[d] for d in lf], [b_t.shape[d] for d in rf]
    cs = [a_t.shape[d] for d in lc]
    a3 = (_prod(bs), _prod(lfs), _prod(cs))
    b3 = (_prod(bs), _prod(cs), _prod(rfs))
    shape = tuple(bs + lfs + rfs)

    # a matrix without batch dims (a linear layer's operands): the matrix itself (or its
    # ``t``), cheaper than permute + reshape (same sizes and strides); only with one free
    # and one contracting dim, where the permutation is id or a swap
    a_mat = len(lf) == len(lc) == 1
    b_mat = len(rf) == len(rc) == 1

    if not lb:  # a matrix product: eager's ``mm``, as the generic path
        a2, b2 = a3[1:], b3[1:]

        def matrix_product(op: Operation, args: list[Any], run: Runner) -> list[Any]:
            a, b = args
            if a.dtype != out or b.dtype != out:
                return generic(op, args, run)
            x = (a if a_id else a.t()) if a_mat else \
                (a if a_id else a.permute(a_perm)).reshape(a2)
            y = (b if b_id else b.t()) if b_mat else \
                (b if b_id else b.permute(b_perm)).reshape(b2)
            return [torch.mm(x, y).reshape(shape)]

        return matrix_product

    def dot_general(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        a, b = args
        if a.dtype != out or b.dtype != out:
            return generic(op, args, run)
        x = (a if a_id else a.permute(a_perm)).reshape(a3)
        y = (b if b_id else b.permute(b_perm)).reshape(b3)
        return [torch.bmm(x, y).reshape(shape)]

    return dot_general


# Below this many elements torch's ``where`` is the faster of the two (measured: at 4096
# elements where takes 3.5 µs and the bit form 8 µs; at 6000 both about 9 µs).
_SELECT_BITS_MIN = 6000
# the integer dtype of each float width: views of a float tensor's bit patterns
SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@specializer("stablehlo.select")
def _select(op: Operation) -> OpFn | None:
    """A same-shape select of real values with many elements: the bit-pattern form."""
    pred_t, a_t, b_t = op.operand_types
    shape = op.result_types[0].shape
    dt = TORCH_DTYPES.get(op.result_types[0].dtype)
    if (
        dt is None or dt.is_complex or not all(s >= 0 for s in shape)
        or _prod(list(shape)) < _SELECT_BITS_MIN
        or not (pred_t.shape == a_t.shape == b_t.shape == shape)
    ):  # fmt: skip
        return None
    itype = SAME_WIDTH_INT.get(dt.itemsize)
    if itype is None:
        return None

    def select_op(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        pred, a, b = args
        if (
            a.dtype != dt or b.dtype != dt or pred.dtype != torch.bool
            or a.shape != b.shape or pred.shape != a.shape
        ):  # fmt: skip
            return [torch.where(pred, a, b)]
        if _runs(pred) >= _SELECT_RUN_MIN:  # a mask broadcast along its inner dims
            return [torch.where(pred, a, b)]
        return [_bits_select(pred, a, b, itype)]

    return select_op


# ``where``'s per-element branch is cheap when the mask holds one value over long runs:
# measured on 12288 floats with the mask broadcast over the last dim (stride 0), ``where``
# takes 13 µs with runs of 16 and 10 µs with runs of 64, the bit form 40-80 µs (its
# integer ops on a stride-0 mask cost more than on a dense one); with runs of 4, ``where``
# takes 115 µs. The stack backward of attention's packed projection selects with a
# (3, 1, 1, 1) mask broadcast to (3, 16, 8, 32): runs of 4096.
_SELECT_RUN_MIN = 16


def _runs(pred: torch.Tensor) -> int:
    """How many consecutive elements (in memory order of the result) share one mask value
    at least: the product of the innermost dims the mask is broadcast along (stride 0)."""
    run = 1
    for size, stride in zip(reversed(pred.shape), reversed(pred.stride()), strict=True):
        if stride and size != 1:
            break
        run *= size
    return run


def _bits_select(pred: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                 itype: torch.dtype) -> torch.Tensor:
    ai, bi = a.view(itype), b.view(itype)  # same width: any strides can be viewed
    mask = pred.to(itype).neg_()  # all ones where pred holds
    d = torch.bitwise_xor(ai, bi)
    d &= mask
    d ^= bi
    return d.view(a.dtype)


def select(pred: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.where(pred, a, b)`` for same-shape, same-dtype real tensors, in whichever
    form is faster for their size (same bits either way)."""
    itype = SAME_WIDTH_INT.get(a.dtype.itemsize)
    if a.numel() < _SELECT_BITS_MIN or itype is None or a.dtype.is_complex:
        return torch.where(pred, a, b)
    return _bits_select(pred, a, b, itype)


# --- float elementwise ops: the torch call alone --------------------------------------------
# The generic elementwise implementations widen unsigned operands and convert the result
# to the declared dtype on every call; with float operands of the result's dtype both are
# no-ops, so the same torch function is called directly (same kernel, same bits).
_FLOAT_BINARY = {
    "stablehlo.add": torch.add,
    "stablehlo.subtract": torch.sub,
    "stablehlo.multiply": torch.mul,
    "stablehlo.divide": torch.div,
    "stablehlo.maximum": torch.maximum,
    "stablehlo.minimum": torch.minimum,
    "stablehlo.power": torch.pow,
}
_FLOAT_UNARY = {
    "stablehlo.negate": torch.neg,
    "stablehlo.abs": torch.abs,
    "stablehlo.exponential": torch.exp,
    "stablehlo.log": torch.log,
    "stablehlo.logistic": torch.sigmoid,
    "stablehlo.tanh": torch.tanh,
    "stablehlo.sqrt": torch.sqrt,
    "stablehlo.rsqrt": torch.rsqrt,
}


def _all_float(op: Operation) -> torch.dtype | None:
    """The common dtype of ``op``'s operands and result if it is one real float dtype."""
    dts = {TORCH_DTYPES.get(t.dtype) for t in (*op.operand_types, *op.result_types)}
    if len(dts) != 1:
        return None
    dt = dts.pop()
    return dt if dt is not None and dt.is_floating_point else None


@specializer(*_FLOAT_BINARY)
def _float_binary(op: Operation) -> OpFn | None:
    if len(op.operands) != 2 or _all_float(op) is None:
        return None
    fn = _FLOAT_BINARY[op.name]
    return lambda op, args, run: [fn(args[0], args[1])]


@specializer(*_FLOAT_UNARY)
def _float_unary(op: Operation) -> OpFn | None:
    if len(op.operands) != 1 or _all_float(op) is None:
        return None
    fn = _FLOAT_UNARY[op.name]
    return lambda op, args, run: [fn(args[0])]
