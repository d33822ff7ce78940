"""A float16 / bfloat16 tensor multiplied or divided by a scalar, as eager: in float32.

ATen's CPU ``mul`` / ``div`` kernels, when the other operand is a scalar (a Python number,
or any 0-d tensor the result does not promote to), read that scalar at float32 precision
(``original_scalar_value<opmath_t>``), compute in float32 and round once. The lowering
rounded the scalar to the half type first and multiplied there: ``bfloat16 x * 1e4`` used
9984 (29% of random elements differed), ``x * 0.01`` and ``x / 3.3`` a fifth to a third.
Mixed-precision models scale by such numbers everywhere (loss scales, ``1 - beta``,
``1 / sqrt(d)`` that is not a power of two). The ``.Scalar`` overloads too (the exact
sweep: float16 ``torch.gradient(x, spacing=[2.0, 2.1])`` traces ``div.Scalar(d, 2.1)``,
which divided by float16's 2.1 and was off by an ulp in 6 of 25 elements).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["HALF_SCALAR_DECOMPOSITIONS"]

aten = torch.ops.aten
HALF_SCALAR_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(HALF_SCALAR_DECOMPOSITIONS)
_HALVES = (torch.float16, torch.bfloat16)


def _scalar32(t: Any, s: Any) -> torch.Tensor | None:
    """``s`` as eager's kernel reads it (float32), when ``t`` is a half tensor and ``s`` a
    scalar operand the result does not promote to; else None."""
    if not isinstance(t, torch.Tensor) or t.dtype not in _HALVES:
        return None
    if isinstance(s, (int, float)) and not isinstance(s, bool):
        return torch.full((), float(s), dtype=torch.float32, device=t.device)
    if isinstance(s, torch.Tensor) and s.dim() == 0 and not s.is_complex() \
            and s.dtype != t.dtype and t.dim() > 0 and torch.result_type(t, s) == t.dtype:
        return s.to(torch.float32)  # a 0-d float or integer tensor: read at float32 too
    return None


@_register(aten.mul.Tensor, aten.mul.Scalar)
def mul(a: Any, b: Any) -> Any:
    # eager reads the scalar at float32 only in second place (``is_cpu_scalar(2)``); a
    # 0-d tensor first is rounded to the half type, as the plain lowering does. A Python
    # number always reaches ATen second.
    s32 = _scalar32(a, b)
    if s32 is not None:
        return (a.to(torch.float32) * s32).to(a.dtype)
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        s32 = _scalar32(b, a)
        if s32 is not None:
            return (b.to(torch.float32) * s32).to(b.dtype)
    return NotImplemented


@_register(aten.div.Tensor, aten.div.Scalar)
def div(a: Any, b: Any) -> Any:
    s32 = _scalar32(a, b)
    if s32 is None:
        return NotImplemented
    return (a.to(torch.float32) / s32).to(a.dtype)
