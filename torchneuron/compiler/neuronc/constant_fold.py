"""Constant folding: ops whose inputs are all constants become constants.

Why: torch-mlir emits scalar arithmetic on literals (``convert`` of an i64 one, its
``broadcast_in_dim`` to the activation shape, ...). Left alone each would be a kernel
and an HBM tensor; folded, a splat is a free on-chip memset. Values come from the
StableHLO interpreter on a one-op function, so folding can never disagree with
execution (a small table of scalar rules covers ops the interpreter rejects).
Results larger than ``MAX_FOLD_BYTES`` stay ops (a constant that big costs HBM reads
and executable size), except splats, which are stored as one value whatever their size.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter import interpret
from torchneuron.compiler.stablehlo import Function, Module, Operation, TensorType
from torchneuron.compiler.stablehlo._dtypes import (
    dense_to_tensor,
    splat_dense,
    tensor_to_dense,
    torch_dtype,
)
from torchneuron.hardware import HardwareProfile

from . import dce
from ._ops import LAYOUT, is_compute, kind, nbytes, short
from .program import Program

MAX_FOLD_BYTES = 64 * 1024
_NEVER_FOLD = frozenset("rng rng_bit_generator while case if custom_call".split())


def const_attr(op: Operation) -> dict[str, Any] | None:
    """The dense attribute of a constant op, whatever key the parser stored it under."""
    val = op.attributes.get("value")
    if isinstance(val, dict) and val.get("_kind") == "dense":
        return val
    for val in op.attributes.values():
        if isinstance(val, dict) and val.get("_kind") == "dense":
            return val
    return None


def _constant(results: list[str], rtype: TensorType, dense: dict[str, Any]) -> Operation:
    """A ``stablehlo.constant`` defining ``results`` (the folded op's names are kept)."""
    return Operation("stablehlo.constant", list(results), [], [], [rtype], {"value": dense})


_SCALAR_RULES: dict[str, Any] = {
    "add": torch.add,
    "subtract": torch.sub,
    "multiply": torch.mul,
    "divide": torch.div,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "negate": torch.neg,
    "abs": torch.abs,
    "exponential": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "logistic": torch.sigmoid,
    "tanh": torch.tanh,
    "convert": lambda x: x,
}


def _rule(op: Operation, consts: list[Operation]) -> torch.Tensor | None:
    """Fallback when the interpreter cannot run an op: a few elementwise ops on splats."""
    fn = _SCALAR_RULES.get(short(op.name))
    if fn is None or len(op.result_types) != 1:
        return None
    args = []
    for c in consts:
        d = const_attr(c)
        assert d is not None
        args.append(dense_to_tensor({**d, "shape": []}))
    if short(op.name) == "divide" and not args[0].is_floating_point():
        return None  # integer division semantics differ (StableHLO truncates)
    return fn(*args).to(torch_dtype(op.result_types[0].dtype))


def _evaluate(op: Operation, consts: list[Operation], scalar: bool) -> torch.Tensor | None:
    """Run ``op`` alone on its constant inputs (as rank-0 values when ``scalar``)."""
    body: list[Operation] = []
    operand_types: list[TensorType] = []
    for c, t in zip(consts, op.operand_types, strict=True):
        d = const_attr(c)
        assert d is not None
        if scalar:
            t = TensorType((), t.dtype)
            d = splat_dense(d["splat"], t.dtype, [])
        operand_types.append(t)
        body.append(_constant([f"c{len(body)}"], t, d))
    rtypes = [TensorType((), t.dtype) for t in op.result_types] if scalar else op.result_types
    inner = Operation(
        op.name,
        list(op.results),
        [c.results[0] for c in body],
        operand_types,
        rtypes,
        op.attributes,
        op.regions,
        op.region_args,
    )
    ret = Operation("func.return", [], list(op.results), list(rtypes), [])
    fn = Function("main", [], [*body, inner, ret], list(rtypes))
    try:
        (out,) = interpret(Module({"main": fn}), [])
    except Exception:  # an op the interpreter lacks: fold by rule or leave it, never fail
        return _rule(op, consts) if scalar else None
    return out


def _fold(op: Operation, consts: list[Operation]) -> Operation | None:
    """The constant replacing ``op``, or None when it should stay an op."""
    if len(op.results) != 1 or short(op.name) in _NEVER_FOLD or not is_compute(op):
        return None
    rtype = op.result_types[0]
    dense = [const_attr(c) for c in consts]
    if any(d is None for d in dense):
        return None
    all_splat = all("splat" in d for d in dense if d is not None)
    if (all_splat and short(op.name) in LAYOUT and dense and dense[0] is not None
            and op.operand_types and op.operand_types[0].dtype == rtype.dtype):
        # broadcast/reshape/transpose of a splat is the same splat at the new shape (not
        # a bitcast_convert to another element type: its value is the splat's bits)
        return _constant(op.results, rtype, {**dense[0], "shape": list(rtype.shape)})
    if all_splat and kind(op) == "elementwise":
        out = _evaluate(op, consts, scalar=True)
        if out is not None:
            value = out.item()
            return _constant(op.results, rtype, splat_dense(value, rtype.dtype, list(rtype.shape)))
    if nbytes(rtype) > MAX_FOLD_BYTES:
        return None
    out = _evaluate(op, consts, scalar=False)
    if out is None:
        return None
    flat = out.reshape(-1)
    if flat.numel() > 0 and bool((flat == flat[0]).all()) and not out.is_complex():
        return _constant(
            op.results, rtype, splat_dense(flat[0].item(), rtype.dtype, list(rtype.shape))
        )
    return _constant(op.results, rtype, tensor_to_dense(out, rtype))


def run(program: Program, profile: HardwareProfile) -> Program:
    """Fold top-level ops with all-constant operands, then drop constants left unused."""
    consts: dict[str, Operation] = {}
    body: list[Operation] = []
    folded = 0
    for op in program.function.body:
        if op.operands and all(v in consts for v in op.operands):
            new = _fold(op, [consts[v] for v in op.operands])
            if new is not None:
                op, folded = new, folded + 1
        if op.name in ("stablehlo.constant", "arith.constant") and len(op.results) == 1:
            consts[op.results[0]] = op
        body.append(op)
    return dce.run(program.with_body(body, folded=folded), profile)
