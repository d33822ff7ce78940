"""Activations of float16 / bfloat16 as eager computes them: in float32, rounded once.

ATen's CPU kernels for ``elu`` (hence ``selu`` / ``celu``), ``gelu`` and ``log_softmax``
convert reduced-precision inputs to float32 ("opmath"), run every step there and round
the result once. The lowering ran each step in the input's precision, rounding after
every multiply and ``exp``: float16 ``gelu(approximate='tanh')`` at -3.5 was off by 39%.
These entries convert to float32, apply the op's float32 lowering and convert back.

``gelu`` (both forms, every float dtype) gets eager's values at the infinities and the
zeros as constants asked of eager on this machine (``host_numerics``): eager's answers
there depend on the CPU (float32 erf-``gelu`` at +inf is NaN on one machine, inf on
another; float32 ``gelu(-0.0)`` is +0.0 where float16's keeps -0.0), so no fixed
lowering matches every machine.

``elu`` (and ``selu`` / ``celu``) is written out as eager's kernel has it,
``x > 0 ? x * scale : expm1(x * input_scale) * (alpha * scale)``, with the coefficient
multiplied in float32 as there: the lowering's ``max(x, 0) * scale + (exp(min(x, 0)) - 1)
* alpha`` sums two zeros at x = -0.0 and gave 0.0 where eager keeps -0.0.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.host_numerics import eager_at_specials

__all__ = ["opmath_decompositions"]

aten = torch.ops.aten
_HALVES = (torch.float16, torch.bfloat16)
_UPCAST_OPS = (aten._log_softmax.default,)


def _gelu_erf(x: torch.Tensor) -> torch.Tensor:
    return (torch.erf(x * math.sqrt(0.5)) + 1.0) * (x * 0.5)


def _with_eager_specials(x: torch.Tensor, y: torch.Tensor, name: str,
                         dtype: torch.dtype) -> torch.Tensor:
    """``y`` with eager's answers (asked of eager on this CPU in ``dtype``) where
    ``x`` is an infinity or a zero. ``y`` is float32 or wider: the answers enter the graph
    as Python-float constants, which every half-type value is exactly in float32."""
    pos_inf, neg_inf, pos_zero, neg_zero = eager_at_specials(name, dtype)
    zero = torch.where(torch.signbit(x), neg_zero, pos_zero).to(y.dtype)
    y = torch.where(x == 0, zero, y)
    y = torch.where(x == math.inf, pos_inf, y)
    return torch.where(x == -math.inf, neg_inf, y)


def _gelu(base: Callable[..., Any] | None) -> Callable[..., Any]:
    def gelu(x: torch.Tensor, approximate: str = "none") -> Any:
        if not x.dtype.is_floating_point:
            return base(x, approximate=approximate) if base else NotImplemented
        name = "aten.gelu" if approximate == "none" else "aten.gelu.tanh"
        wide = x.to(torch.float32) if x.dtype in _HALVES else x
        if approximate == "none" and x.dtype != torch.float64:
            y = _gelu_erf(wide)
        elif x.dtype in _HALVES:
            y = aten.gelu.default(wide, approximate=approximate)
        elif base is not None:  # float32 tanh form, float64: the lowering's own
            y = base(x, approximate=approximate)
        else:
            return NotImplemented
        if y is NotImplemented:
            return y
        return _with_eager_specials(wide, y, name, x.dtype).to(x.dtype)

    return gelu


def _elu(x: torch.Tensor, alpha: float = 1.0, scale: float = 1.0,
         input_scale: float = 1.0) -> Any:
    if not x.is_floating_point():
        return NotImplemented
    opmath = torch.float32 if x.dtype in _HALVES else x.dtype
    # the coefficients as the kernel holds them, rounded in plain Python: a tensor made
    # here would be traced into the graph (AOTAutograd then finds a stray detach_)
    r = _to_float32 if opmath == torch.float32 else float
    negcoef = r(r(alpha) * r(scale))  # a float32 product is exact in double, rounded once
    poscoef = r(scale)
    negiptcoef = r(input_scale)
    y = x.to(opmath)
    out = torch.where(y > 0, y * poscoef, torch.expm1(y * negiptcoef) * negcoef)
    return out.to(x.dtype)


def _to_float32(v: float) -> float:
    """``v`` rounded to the nearest float32 (ties to even), as a Python float."""
    try:
        return struct.unpack("f", struct.pack("f", float(v)))[0]
    except OverflowError:  # beyond float32's range: the cast gives an infinity
        return math.copysign(math.inf, v)


def _upcast(op: Any, base: Callable[..., Any] | None) -> Callable[..., Any]:
    def fn(x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if x.dtype not in _HALVES:
            return base(x, *args, **kwargs) if base else NotImplemented
        if op is aten._log_softmax.default:  # (x, dim, half_to_float)
            out = op(x.to(torch.float32), args[0], False)
            return out if args[1] else out.to(x.dtype)
        return op(x.to(torch.float32), *args, **kwargs).to(x.dtype)

    return fn


def opmath_decompositions(base: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """Entries wrapping ``base``'s (the table built so far): float32 and float64 inputs
    keep ``base``'s entry (or the op's own lowering when it has none)."""
    table: dict[Any, Callable[..., Any]] = {op: _upcast(op, base.get(op)) for op in _UPCAST_OPS}
    table[aten.gelu.default] = _gelu(base.get(aten.gelu.default))
    table[aten.elu.default] = _elu
    return table
