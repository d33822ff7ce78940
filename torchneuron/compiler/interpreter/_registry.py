"""The op dispatch table shared by the interpreter's op families, and its errors.

Each StableHLO op is one small function ``fn(op, args, run) -> results`` registered with
``@register("stablehlo.add", ...)``; ``run`` lets an op evaluate its regions (reduce
bodies, sort comparators, while loops) with the same interpreter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from torchneuron.compiler.stablehlo._dtypes import dense_to_tensor, torch_dtype
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = [
    "OPS",
    "register",
    "Runner",
    "UnsupportedStableHLOOp",
    "StableHLOExecutionError",
    "out_dtype",
    "ints",
    "static",
    "attr_tensor",
    "CONSTANT_OPS",
    "NEVER_HOISTED",
]


class UnsupportedStableHLOOp(NotImplementedError):
    """The interpreter has no implementation for this op (the message and ``.op`` name it)."""

    def __init__(self, message: str, op: str | None = None) -> None:
        super().__init__(message)
        self.op = op


class StableHLOExecutionError(RuntimeError):
    """An op failed while running; the message names the op and ``.op`` holds its name."""

    def __init__(self, message: str, op: str | None = None) -> None:
        super().__init__(message)
        self.op = op


class Runner(Protocol):
    """What an op implementation may ask of the interpreter."""

    def region(
        self, op: Operation, index: int, args: list[Any], batched: bool = False
    ) -> list[Any]:
        """Run region ``index`` of ``op`` with ``args`` bound to its block arguments.

        ``batched``: the arguments carry extra leading dimensions (a reduce body applied
        to many element pairs at once), so declared scalar shapes are not checked.
        """
        ...

    def call(self, name: str, args: list[Any]) -> list[Any]:
        """Run another function of the module."""
        ...


OpFn = Callable[[Operation, list[Any], Runner], list[Any]]
OPS: dict[str, OpFn] = {}

# Ops whose result depends only on their attributes: computed once, then reused, as is
# every op whose operands are all such values (a run of ops folded into no call at all).
CONSTANT_OPS = ("stablehlo.constant", "arith.constant", "stablehlo.iota")
# Ops never computed once and kept, even from constants (calls, barriers, side effects).
NEVER_HOISTED = ("func.call", "stablehlo.call", "stablehlo.custom_call",
                 "stablehlo.optimization_barrier")  # fmt: skip


def register(*names: str) -> Callable[[OpFn], OpFn]:
    """Register ``fn`` as the implementation of every op in ``names``."""

    def deco(fn: OpFn) -> OpFn:
        for n in names:
            OPS[n] = fn
        return fn

    return deco


def out_dtype(op: Operation, i: int = 0) -> torch.dtype:
    """The torch dtype of result ``i`` (what the op must produce)."""
    return torch_dtype(op.result_types[i].dtype)


def out_shape(op: Operation, i: int = 0) -> list[int]:
    return list(op.result_types[i].shape)


def static(shape: Sequence[int]) -> bool:
    """Whether every dimension of ``shape`` is known (StableHLO writes a dynamic one as -1)."""
    return all(s >= 0 for s in shape)


def ints(op: Operation, name: str, default: list[int] | None = None) -> list[int]:
    """An integer-list attribute; dense tensor attributes are flattened row-major."""
    v = op.attributes.get(name)
    if v is None:
        if default is None:
            raise KeyError(f"{op.name} has no attribute {name!r}")
        return list(default)
    if isinstance(v, dict) and v.get("_kind") == "dense":
        return [int(x) for x in dense_to_tensor(v).reshape(-1).tolist()]
    return [int(x) for x in v]


def attr_tensor(op: Operation, name: str) -> torch.Tensor:
    return dense_to_tensor(op.attributes[name])
