"""Load-time simplification of a block's ops: no-op ops become aliases, dead views go.

Why: the lowering emits many ops that compute nothing: a reshape or broadcast to the
shape the value already has, a zero pad, a slice of the whole tensor, a convert to
the same dtype, an identity transpose, and chains of reshapes of which only the last
is used. Running them costs a call each on every run. Here, once per block:

- an op that returns its operand unchanged is dropped; its result becomes an alias
  of the operand (later ops read the operand instead);
- a reshape of a reshape reads the first reshape's operand (same values, one view),
  and is an alias of it when it gives that operand's own shape back;
- a transpose undoing the transpose it reads (the permutations compose to the identity)
  is an alias of that transpose's operand;
- an arithmetic op with a splat constant operand that leaves the other operand unchanged
  is an alias of that operand: ``x * 1`` (``addmm``'s ``beta`` and ``alpha`` of 1
  lower to two of them per linear layer, the one as a converted, reshaped and
  broadcast integer constant), ``x / 1``, ``x - (+0)`` and ``x + (-0)`` are ``x`` bit
  for bit in float32, float64 and the integer dtypes (a signalling NaN would come out
  quiet; torch never makes one); not in float16 or bfloat16, whose ops rewrite a NaN's
  sign or payload. Not ``x + (+0)``: ``-0 + 0`` is ``+0``. The constant's value is
  found through the broadcasts, reshapes and converts between it and the op, each
  convert applied by the interpreter's own implementation, so a ``-0.0`` converted to
  an integer and back counts as the ``+0`` it becomes;
- a pure shape op (reshape, broadcast, transpose, slice, convert) whose results are
  no longer read by anyone is dropped.

Values read from inside nested regions (while bodies read outer values) are never
aliased or dropped, since a region looks them up by name in the enclosing scope.
Results are the same tensors' values as before: only views and identities change.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from torchneuron.compiler.interpreter._ops_elementwise import convert
from torchneuron.compiler.interpreter._registry import ints, static
from torchneuron.compiler.stablehlo._dtypes import dense_to_tensor
from torchneuron.compiler.stablehlo.ir import Operation, TensorType

__all__ = ["region_reads", "simplify"]

_PURE_SHAPE_OPS = ("stablehlo.reshape", "stablehlo.broadcast_in_dim", "stablehlo.transpose",
                   "stablehlo.slice", "stablehlo.convert")  # fmt: skip



def _is_identity(op: Operation) -> bool:
    """Whether ``op`` returns its (first) operand unchanged: same type, no work."""
    if len(op.results) != 1 or not op.operand_types or op.regions:
        return False
    src, dst = op.operand_types[0], op.result_types[0]
    if src != dst or not static(dst.shape):
        return False
    name, rank = op.name, len(dst.shape)
    if name in ("stablehlo.reshape", "stablehlo.convert"):
        return len(op.operands) == 1
    if name == "stablehlo.broadcast_in_dim":
        return len(op.operands) == 1 and ints(op, "broadcast_dimensions") == list(range(rank))
    if name == "stablehlo.transpose":
        return ints(op, "permutation") == list(range(rank))
    if name == "stablehlo.pad":
        return not any(
            any(ints(op, k, [0] * rank))
            for k in ("edge_padding_low", "edge_padding_high", "interior_padding")
        )
    if name == "stablehlo.slice":
        return (
            ints(op, "start_indices") == [0] * rank
            and ints(op, "limit_indices") == list(dst.shape)
            and ints(op, "strides", [1] * rank) == [1] * rank
        )
    return False


# how a splat constant may reach an op's operand, value unchanged but for converts
_SPLAT_PATH = ("stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.convert")
_CONSTANTS = ("stablehlo.constant", "arith.constant")


def _splat(name: str, producer: dict[str, tuple[Operation, tuple[str, ...]]]) -> Any:
    """The one value every element of ``name`` has, as a one-element tensor of its
    dtype, when ``name`` is a constant with a single value seen through broadcasts,
    reshapes and converts (each convert run as the interpreter runs it); else None."""
    path: list[Operation] = []
    while True:
        hit = producer.get(name)
        if hit is None or hit[0].regions:
            return None
        op, operands = hit
        if op.name in _CONSTANTS and not operands:
            break
        if op.name not in _SPLAT_PATH or len(operands) != 1 or len(path) > 8:
            return None
        path.append(op)
        name = operands[0]
    value = op.attributes.get("value")
    if not isinstance(value, dict) or value.get("_kind") != "dense":
        return None
    if "splat" in value:  # one element stands for all (not materialised at full size)
        t = dense_to_tensor({**value, "shape": [1]})
    elif static(value["shape"]) and math.prod(value["shape"]) == 1:
        t = dense_to_tensor(value).reshape(1)
    else:
        return None
    for p in reversed(path):
        if p.name == "stablehlo.convert":
            t = convert(p, [t], None)[0]
    return t


def _identity_operand(op: Operation, operands: tuple[str, ...],
                      producer: dict[str, tuple[Operation, tuple[str, ...]]]) -> str | None:
    """The operand ``op`` returns unchanged: ``x * 1``, ``1 * x``, ``x / 1``,
    ``x - (+0)``, ``x + (-0)`` or ``(-0) + x`` with a splat constant (see the module
    docstring)."""
    if op.name not in _IDENTITY_SIDES or len(operands) != 2 or op.regions:
        return None
    dst = op.result_types[0]
    if not static(dst.shape) or dst.dtype in _NOT_IDENTITY_DTYPES:
        return None
    for side in _IDENTITY_SIDES[op.name]:  # the side of x; the constant is the other
        if op.operand_types[side] != dst:
            continue
        c = _splat(operands[1 - side], producer)
        if c is None or c.dtype.is_complex or c.dtype == torch.bool:
            continue
        v = c.item()
        floating = c.dtype.is_floating_point
        if op.name in ("stablehlo.multiply", "stablehlo.divide"):
            hit = v == 1
        elif op.name == "stablehlo.subtract":  # x - (+0); in integers any zero
            hit = v == 0 and not (floating and math.copysign(1.0, v) < 0)
        else:  # add: x + (-0); in integers any zero
            hit = v == 0 and (not floating or math.copysign(1.0, v) < 0)
        if hit:
            return operands[side]
    return None


# where ``x * 1`` and the like may not give ``x``'s bits back: torch's scalar conversion
# to bfloat16 makes every NaN the positive quiet NaN and float16 quiets signalling ones
# (a NaN's sign and payload would differ from the op's); i1 and complex are not arithmetic
_NOT_IDENTITY_DTYPES = ("i1", "f16", "bf16", "complex<f32>", "complex<f64>")

# per op, the operand sides that may be the ``x`` of ``_identity_operand``
_IDENTITY_SIDES = {
    "stablehlo.multiply": (0, 1),
    "stablehlo.add": (0, 1),
    "stablehlo.divide": (0,),
    "stablehlo.subtract": (0,),
}


def _untranspose(op: Operation, operands: tuple[str, ...],
                 producer: dict[str, tuple[Operation, tuple[str, ...]]]) -> str | None:
    """The value ``op`` returns unchanged if it undoes the transpose it reads."""
    if op.name != "stablehlo.transpose" or len(operands) != 1:
        return None
    src = producer.get(operands[0])
    if src is None or src[0].name != "stablehlo.transpose" or len(src[1]) != 1:
        return None
    outer, inner = ints(op, "permutation"), ints(src[0], "permutation")
    if len(outer) != len(inner) or [inner[i] for i in outer] != list(range(len(outer))):
        return None
    if src[0].operand_types[0] != op.result_types[0] or not static(op.result_types[0].shape):
        return None
    return src[1][0]


def region_reads(ops: list[Operation], out: set[str] | None = None) -> set[str]:
    """Every name read by an op inside a region of ``ops`` (at any depth): such values
    are looked up by name from the enclosing scope, so no pass may alias or drop them."""
    out = set() if out is None else out
    for op in ops:
        for region in op.regions:
            for inner in region:
                out.update(inner.operands)
            region_reads(region, out)
    return out


def simplify(
    ops: list[Operation], returns: list[str] | None, pinned: set[str]
) -> tuple[list[tuple[Operation, tuple[str, ...]]], tuple[str, ...] | None]:
    """The ops still to run, each with the operand names it should read, and the
    names the block returns, after aliasing and dead-view removal (module docstring).
    ``pinned``: ``region_reads(ops)``.
    """
    alias: dict[str, str] = {}
    producer: dict[str, tuple[Operation, tuple[str, ...]]] = {}
    kept: list[tuple[Operation, tuple[str, ...]]] = []
    types: dict[str, TensorType] = {}  # each name's declared type (aliases keep the type)
    for op in ops:
        for name, ty in zip(op.operands, op.operand_types, strict=False):
            types.setdefault(name, ty)
        for name, ty in zip(op.results, op.result_types, strict=False):
            types.setdefault(name, ty)
        operands = tuple(alias.get(o, o) for o in op.operands)
        if _is_identity(op) and op.results[0] not in pinned:
            alias[op.results[0]] = operands[0]
            continue
        same = _identity_operand(op, operands, producer) or _untranspose(op, operands, producer)
        if same is not None and op.results[0] not in pinned:
            alias[op.results[0]] = same
            continue
        if op.name == "stablehlo.reshape" and len(operands) == 1 and static(
            op.result_types[0].shape
        ):
            src = producer.get(operands[0])
            if src is not None and src[0].name == "stablehlo.reshape" and len(src[1]) == 1:
                operands = src[1]  # reshape(reshape(x)) == reshape(x)
                if (  # x's own type: src may itself read past a reshape
                    types.get(operands[0]) == op.result_types[0]
                    and op.results[0] not in pinned
                ):  # fmt: skip
                    alias[op.results[0]] = operands[0]  # ... == x: back to x's shape
                    continue
        for r in op.results:
            producer[r] = (op, operands)
        kept.append((op, operands))
    rets = None if returns is None else tuple(alias.get(o, o) for o in returns)
    # drop pure shape ops nobody reads any more (in reverse, so chains go at once)
    used = set(pinned) | set(rets or ())
    live: list[tuple[Operation, tuple[str, ...]]] = []
    for op, operands in reversed(kept):
        if op.name in _PURE_SHAPE_OPS and not op.regions and not any(
            r in used for r in op.results
        ):
            continue
        used.update(operands)
        live.append((op, operands))
    live.reverse()
    return live, rets
