"""StableHLO ops torch-mlir rarely emits with our decompositions, kept so other
decomposition choices still run: batch_norm_{training,inference,grad}, cholesky,
triangular_solve and reduce_precision.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import Runner, out_dtype, register
from torchneuron.compiler.stablehlo.ir import Operation


def _bn_view(op: Operation, x: torch.Tensor) -> tuple[int, list[int], list[int]]:
    """Feature dim, the other dims (reduced over), and the view of a per-feature vector."""
    f = int(op.attributes["feature_index"]) % x.dim()
    dims = [d for d in range(x.dim()) if d != f]
    view = [1] * x.dim()
    view[f] = x.shape[f]
    return f, dims, view


@register("stablehlo.batch_norm_training")
def batch_norm_training(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    x, scale, offset = args
    eps = float(op.attributes["epsilon"])
    _, dims, view = _bn_view(op, x)
    mean = x.mean(dim=dims)
    var = ((x - mean.reshape(view)) ** 2).mean(dim=dims)  # biased, as the spec says
    y = (x - mean.reshape(view)) * torch.rsqrt(var.reshape(view) + eps)
    return [y * scale.reshape(view) + offset.reshape(view), mean, var]


@register("stablehlo.batch_norm_inference")
def batch_norm_inference(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    x, scale, offset, mean, var = args
    eps = float(op.attributes["epsilon"])
    _, _, view = _bn_view(op, x)
    y = (x - mean.reshape(view)) * torch.rsqrt(var.reshape(view) + eps)
    return [y * scale.reshape(view) + offset.reshape(view)]


@register("stablehlo.batch_norm_grad")
def batch_norm_grad(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    x, scale, mean, var, dy = args
    eps = float(op.attributes["epsilon"])
    _, dims, view = _bn_view(op, x)
    n = x.numel() // scale.numel()
    std = torch.sqrt(var.reshape(view) + eps)
    norm = (x - mean.reshape(view)) / std
    d_offset = dy.sum(dim=dims)
    d_scale = (dy * norm).sum(dim=dims)
    dx = (scale.reshape(view) / std) * (
        dy - d_offset.reshape(view) / n - norm * d_scale.reshape(view) / n
    )
    return [dx, d_scale, d_offset]


@register("stablehlo.cholesky")
def cholesky(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    (a,) = args
    return [torch.linalg.cholesky(a, upper=not bool(op.attributes.get("lower", False)))]


@register("stablehlo.triangular_solve")
def triangular_solve(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    a, b = args
    lower = bool(op.attributes["lower"])
    if op.attributes.get("transpose_a", "NO_TRANSPOSE") != "NO_TRANSPOSE":
        a, lower = a.mT, not lower  # TRANSPOSE and ADJOINT agree for real types
    return [
        torch.linalg.solve_triangular(
            a,
            b,
            upper=not lower,
            left=bool(op.attributes["left_side"]),
            unitriangular=bool(op.attributes["unit_diagonal"]),
        )
    ]


_NARROW = {(8, 7): torch.bfloat16, (5, 10): torch.float16, (8, 23): torch.float32}


@register("stablehlo.reduce_precision")
def reduce_precision(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    (x,) = args
    key = (int(op.attributes["exponent_bits"]), int(op.attributes["mantissa_bits"]))
    narrow = _NARROW.get(key)
    if narrow is None:
        raise NotImplementedError(f"reduce_precision to e{key[0]}m{key[1]}")
    return [x.to(narrow).to(out_dtype(op))]
