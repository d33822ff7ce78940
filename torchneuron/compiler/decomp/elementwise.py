"""Elementwise ops whose Torch-MLIR lowering is missing or refuses a form eager accepts.

- ``fmod.Scalar``: the scalar divisor stays a dangling ``torch.constant.float``; a 0-d
  tensor divisor lowers (``stablehlo.remainder`` is C fmod, as ATen's fmod is).
- (``polar`` is refused, ``decomp/complex.py``: eager's sin and cos are not the lowered.)
- ``nextafter``: no lowering. It is pure IEEE bit arithmetic: step the integer
  representation by one towards the target, the smallest subnormal from zero, NaN in,
  NaN out, target returned when equal (C's nextafter, which ATen calls).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar
from torchneuron.compiler.errors import PrepareError

__all__ = ["ELEMENTWISE_DECOMPOSITIONS"]

aten = torch.ops.aten
ELEMENTWISE_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}


_register = registrar(ELEMENTWISE_DECOMPOSITIONS)


@_register(aten.fmod.Scalar)
def fmod_scalar(a: torch.Tensor, b: Any) -> torch.Tensor:
    rhs = torch.scalar_tensor(b, dtype=torch.result_type(a, b), device=a.device)
    return aten.fmod.Tensor(a, rhs)


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


@_register(aten.isfinite.default)
def isfinite(x: torch.Tensor) -> torch.Tensor:
    """``|x| < inf``: false for NaN and both infinities. ATen's composite,
    ``(x == x) * (|x| != inf)``, loses the NaN test: Torch-MLIR folds ``x == x`` to
    true. Integer and bool elements are all finite; complex keeps the previous entry."""
    if x.dtype.is_complex:
        return NotImplemented
    if not x.dtype.is_floating_point:
        return torch.ones_like(x, dtype=torch.bool)
    return torch.abs(x) < math.inf


@_register(aten.eq.Tensor)
def eq_tensor(a: torch.Tensor, b: Any) -> torch.Tensor:
    """``x == x`` of a float tensor is ``~isnan(x)``: Torch-MLIR folds an equality of a
    value with itself to true, which is wrong at NaN. Other equalities are traced as is."""
    if a is b and (a.dtype.is_floating_point or a.dtype.is_complex):
        return torch.logical_not(torch.isnan(a))
    return NotImplemented


@_register(aten.hypot.default)
def hypot(a: torch.Tensor, b: torch.Tensor) -> Any:
    """As eager's (Sleef's) hypot: no overflow (``sqrt(a*a + b*b)`` gave inf at 1e30 in
    float32), inf when either side is infinite, even with a NaN other side. float32 and
    narrower: the exact sum of squares in float64, rounded once to float32 (eager's
    correctly rounded float32 result, then its dtype). float64 is refused
    (``hypot-float64``): eager's vectorised loop (Sleef) rounds correctly and its scalar
    tail (the C library's hypot) is an ulp off about once in 500 values, so eager's bits
    depend on where an element sits; NotImplemented while AOTAutograd traces (a raise
    there escapes torch.compile), so prepare's own trace refuses."""
    dtype = torch.result_type(a, b)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    if dtype == torch.float64:
        if torch._guards.TracingContext.try_get() is not None:
            return NotImplemented
        raise PrepareError(
            "aten.hypot: eager's float64 hypot rounds differently in its vectorised loop "
            "and its scalar tail, so no lowering matches it; this region runs eagerly.",
            op="aten.hypot", reason="hypot-float64")
    x, y = a.to(dtype).abs().double(), b.to(dtype).abs().double()
    r = torch.sqrt(x * x + y * y)
    r = torch.where((x == math.inf) | (y == math.inf), math.inf, r)  # float64 constants:
    return r.to(torch.float32).to(dtype)  # (float32 constants: no ml_dtypes needed)


@_register(aten.angle.default)
def angle(x: torch.Tensor) -> torch.Tensor:
    if x.is_complex():
        return NotImplemented
    x = x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())
    return torch.where(torch.isnan(x), x, torch.where(x < 0, math.pi, 0.0).to(x.dtype))


@_register(aten.round.decimals)
def round_decimals(x: torch.Tensor, *, decimals: int = 0) -> Any:
    """ATen's order: ``nearbyint(x / 10**-d) * 10**-d`` for negative ``d``, ``nearbyint(x *
    10**d) / 10**d`` for positive, in float32 for half types. PyTorch's reference multiplies
    by ``10**-d`` instead, which is inexact: float32's max rounded to 3.4028233e38 at
    ``decimals=-3`` where eager keeps 3.4028235e38."""
    if decimals == 0 or abs(decimals) > 300 or not x.is_floating_point():
        return NotImplemented
    wide = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    ten = 10.0 ** abs(decimals)
    if wide == torch.float32:  # (ATen casts the power to the op's math type)
        try:
            ten = struct.unpack("f", struct.pack("f", ten))[0]
        except OverflowError:
            ten = math.inf
    a = x.to(wide)
    r = torch.round(a / ten) * ten if decimals < 0 else torch.round(a * ten) / ten
    return r.to(x.dtype)


@_register(aten.frexp.Tensor)
def frexp(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mantissa in [0.5, 1) and exponent. The scale 2**e is applied in two halves: for the
    dtype's largest numbers 2**e itself overflows (float32's max has e = 128), and x / inf
    gave a mantissa of 0 where eager gives 0.99999994; each half is a power of two in
    range, so both divisions are exact."""
    ax = torch.abs(x)
    safe = torch.where((ax == 0) | ~torch.isfinite(ax), 1.0 + 0 * x, ax)
    e = torch.floor(torch.log2(safe)) + 1
    half = torch.floor(e / 2)
    m = x / torch.pow(2.0, half) / torch.pow(2.0, e - half)
    fix_hi, fix_lo = torch.abs(m) >= 1, (torch.abs(m) < 0.5) & (m != 0)
    e = torch.where(fix_hi, e + 1, torch.where(fix_lo, e - 1, e))
    m = torch.where(fix_hi, m / 2, torch.where(fix_lo, m * 2, m))
    m = torch.where(torch.isfinite(x), m, x)
    return m, torch.where((ax == 0) | ~torch.isfinite(x), 0, e.to(torch.int32))
