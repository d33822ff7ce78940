"""Builders for small StableHLO programs, so neuronc tests do not depend on torch-mlir."""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.stablehlo import Function, Module, Operation, TensorType
from torchneuron.compiler.stablehlo._dtypes import splat_dense, tensor_to_dense

MATMUL = {
    "dot_dimension_numbers": {
        "lhs_batching_dimensions": [],
        "rhs_batching_dimensions": [],
        "lhs_contracting_dimensions": [1],
        "rhs_contracting_dimensions": [0],
    }
}


class Builder:
    """Appends ops to one ``main`` function; values are named like torch-mlir's (%0, %1...)."""

    def __init__(self) -> None:
        self.args: list[tuple[str, TensorType]] = []
        self.body: list[Operation] = []
        self.types: dict[str, TensorType] = {}
        self.count = 0

    def _name(self) -> str:
        self.count += 1
        return str(self.count - 1)

    def arg(self, shape: tuple[int, ...], dtype: str = "f32") -> str:
        name = f"arg{len(self.args)}"
        self.args.append((name, TensorType(tuple(shape), dtype)))
        self.types[name] = TensorType(tuple(shape), dtype)
        return name

    def op(
        self,
        name: str,
        operands: list[str],
        shape: tuple[int, ...] | None = None,
        dtype: str | None = None,
        regions: Any = None,
        **attrs: Any,
    ) -> str:
        first = self.types[operands[0]] if operands else TensorType((), "f32")
        rtype = TensorType(tuple(shape) if shape is not None else first.shape, dtype or first.dtype)
        res = self._name()
        self.body.append(
            Operation(
                name=f"stablehlo.{name}",
                results=[res],
                operands=list(operands),
                operand_types=[self.types[o] for o in operands],
                result_types=[rtype],
                attributes=dict(attrs),
                regions=regions or [],
                region_args=[],
            )
        )
        self.types[res] = rtype
        return res

    def dot(self, a: str, b: str) -> str:
        (m, _), (_, n) = self.types[a].shape, self.types[b].shape
        return self.op("dot_general", [a, b], (m, n), **MATMUL)

    def splat(self, value: float, shape: tuple[int, ...], dtype: str = "f32") -> str:
        res = self._name()
        t = TensorType(tuple(shape), dtype)
        self.body.append(
            Operation(
                "stablehlo.constant",
                [res],
                [],
                [],
                [t],
                {"value": splat_dense(value, dtype, list(shape))},
            )
        )
        self.types[res] = t
        return res

    def dense(self, tensor: torch.Tensor, dtype: str = "f32") -> str:
        res = self._name()
        t = TensorType(tuple(tensor.shape), dtype)
        self.body.append(
            Operation(
                "stablehlo.constant", [res], [], [], [t], {"value": tensor_to_dense(tensor, t)}
            )
        )
        self.types[res] = t
        return res

    def reduce_sum(self, x: str, dims: list[int]) -> str:
        init = self.splat(0.0, (), self.types[x].dtype)
        shape = tuple(d for i, d in enumerate(self.types[x].shape) if i not in dims)
        s = TensorType((), self.types[x].dtype)
        region = [
            Operation("stablehlo.add", ["r"], ["a", "b"], [s, s], [s]),
            Operation("stablehlo.return", [], ["r"], [s], []),
        ]
        res = self.op("reduce", [x, init], shape, regions=[region], dimensions=dims)
        self.body[-1].region_args = [[("a", s), ("b", s)]]
        return res

    def build(self, *outputs: str) -> Module:
        types = [self.types[o] for o in outputs]
        body = [*self.body, Operation("func.return", [], list(outputs), types, [])]
        return Module({"main": Function("main", list(self.args), body, types)})


def mlp(batch: int = 64, d_in: int = 256, hidden: int = 512, d_out: int = 128) -> Module:
    """dot_general + bias add + logistic + dot_general: the canonical fusion example."""
    b = Builder()
    x, w1, b1, w2 = (
        b.arg((batch, d_in)),
        b.arg((d_in, hidden)),
        b.arg((hidden,)),
        b.arg((hidden, d_out)),
    )
    h = b.dot(x, w1)
    bias = b.op("broadcast_in_dim", [b1], (batch, hidden), broadcast_dimensions=[1])
    a = b.op("logistic", [b.op("add", [h, bias])])
    return b.build(b.dot(a, w2))


def softmax_like(rows: int, cols: int) -> Module:
    """Row-normalisation: reduce, subtract, exp, reduce, divide (sum stands in for max)."""
    b = Builder()
    x = b.arg((rows, cols))
    m = b.op("broadcast_in_dim", [b.reduce_sum(x, [1])], (rows, cols), broadcast_dimensions=[0])
    e = b.op("exponential", [b.op("subtract", [x, m])])
    s = b.op("broadcast_in_dim", [b.reduce_sum(e, [1])], (rows, cols), broadcast_dimensions=[0])
    return b.build(b.op("divide", [e, s]))
