"""Activations of float16 / bfloat16 as eager computes them: in float32, rounded once.

ATen's CPU kernels for ``elu`` (hence ``selu`` / ``celu``), ``gelu`` and ``log_softmax``
convert reduced-precision inputs to float32 ("opmath"), run every step there and round
the result once. The lowering ran each step in the input's precision, rounding after
every multiply and ``exp``: float16 ``gelu(approximate='tanh')`` at -3.5 was off by 39%.
These entries convert to float32, apply the op's float32 lowering and convert back.

``gelu`` (the erf form) also gets eager's value at +inf: float32 and narrower eager
kernels give NaN there (their erf evaluation multiplies inf by 0), while the product
``x/2 * (1 + erf(x/sqrt 2))`` the lowering emits gives inf. float64 eager gives inf and
is left alone.

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

__all__ = ["opmath_decompositions"]

aten = torch.ops.aten
_HALVES = (torch.float16, torch.bfloat16)
_UPCAST_OPS = (aten._log_softmax.default,)


def _gelu_erf(x: torch.Tensor) -> torch.Tensor:
    """float32 erf-gelu with eager's NaN at +inf (eager's -inf and NaN give NaN already)."""
    y = (torch.erf(x * math.sqrt(0.5)) + 1.0) * (x * 0.5)
    return torch.where(x == math.inf, math.nan, y)


def _gelu(base: Callable[..., Any] | None) -> Callable[..., Any]:
    def gelu(x: torch.Tensor, approximate: str = "none") -> Any:
        if x.dtype not in (*_HALVES, torch.float32):
            return base(x, approximate=approximate) if base else NotImplemented
        if approximate == "none":
            return _gelu_erf(x.to(torch.float32)).to(x.dtype)
        if x.dtype == torch.float32:  # the tanh form: the lowering's own
            return base(x, approximate=approximate) if base else NotImplemented
        return aten.gelu.default(x.to(torch.float32), approximate=approximate).to(x.dtype)

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
