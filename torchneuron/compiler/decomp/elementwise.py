"""Elementwise ops whose Torch-MLIR lowering is missing or refuses a form eager accepts.

- ``fmod.Scalar``: the scalar divisor stays a dangling ``torch.constant.float``; a 0-d
  tensor divisor lowers (``stablehlo.remainder`` is C fmod, as ATen's fmod is).
- ``polar`` with operands of different shapes: the lowering requires equal shapes; the
  operands are broadcast first (same arithmetic, abs * cos(angle), abs * sin(angle)).
- ``nextafter``: no lowering. It is pure IEEE bit arithmetic: step the integer
  representation by one towards the target, the smallest subnormal from zero, NaN in,
  NaN out, target returned when equal (C's nextafter, which ATen calls).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["ELEMENTWISE_DECOMPOSITIONS"]

aten = torch.ops.aten
ELEMENTWISE_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}


_register = registrar(ELEMENTWISE_DECOMPOSITIONS)


@_register(aten.fmod.Scalar)
def fmod_scalar(a: torch.Tensor, b: Any) -> torch.Tensor:
    rhs = torch.scalar_tensor(b, dtype=torch.result_type(a, b), device=a.device)
    return aten.fmod.Tensor(a, rhs)


@_register(aten.polar.default)
def polar(magnitude: torch.Tensor, angle: torch.Tensor) -> Any:
    """Broadcast, then the op itself (``NotImplemented`` once shapes agree, so tracing
    records ``polar``, which lowers)."""
    if magnitude.shape == angle.shape:
        return NotImplemented
    shape = torch.broadcast_shapes(magnitude.shape, angle.shape)
    return aten.polar.default(magnitude.expand(shape).clone(), angle.expand(shape).clone())


_BITS = {torch.float32: torch.int32, torch.float64: torch.int64}


@_register(aten.nextafter.default)
def nextafter(a: torch.Tensor, b: torch.Tensor) -> Any:
    dtype = torch.result_type(a, b)
    if dtype not in _BITS:
        return NotImplemented  # half types: their bit steps are not written here
    shape = torch.broadcast_shapes(a.shape, b.shape)
    x, y = a.to(dtype).expand(shape), b.to(dtype).expand(shape)
    bits = x.view(_BITS[dtype])
    away = (y > x) == (x > 0)  # moving away from zero: the magnitude grows by one step
    step = torch.where(away, bits + 1, bits - 1).view(dtype)
    tiny = torch.where(y > 0, torch.ones_like(bits), torch.full_like(bits, _sign_bit(dtype) + 1))
    from_zero = tiny.view(dtype)  # +-(smallest subnormal): bits 1 or sign | 1
    out = torch.where(x == 0, from_zero, step)
    out = torch.where(x == y, y, out)
    return torch.where(torch.isnan(x) | torch.isnan(y), x + y, out)


def _sign_bit(dtype: torch.dtype) -> int:
    """The sign bit alone, as the signed integer of the float's width."""
    return -(1 << 31) if dtype == torch.float32 else -(1 << 63)
