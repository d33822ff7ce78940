"""Elementwise StableHLO ops (unary, binary, compare, select, clamp, convert).

Each op computes in the operand dtype (bf16 stays bf16, f32 stays f32) so results
match eager PyTorch; integer division truncates toward zero and remainder takes the
sign of the dividend, as the StableHLO spec says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import Runner, out_dtype, out_shape, register
from torchneuron.compiler.stablehlo.ir import Operation

_WIDE_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)
_LARGEST_F64_BELOW_2_63 = 9223372036854774784.0


def _widen(args: list[torch.Tensor]) -> list[torch.Tensor]:
    """torch lacks arithmetic on uint16/32/64: compute those in int64 instead."""
    return [a.to(torch.int64) if a.dtype in _WIDE_UNSIGNED else a for a in args]


def _finish(op: Operation, r: torch.Tensor) -> torch.Tensor:
    dt = out_dtype(op)
    return r if r.dtype == dt else r.to(dt)


def _unary(names: tuple[str, ...], fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    def impl(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        return [_finish(op, fn(_widen(args)[0]))]

    register(*names)(impl)


def _binary(
    names: tuple[str, ...], fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> None:
    def impl(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        a, b = _widen(args)
        return [_finish(op, fn(a, b))]

    register(*names)(impl)


def _is_float(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point or t.dtype.is_complex


def _divide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if _is_float(a):
        return a / b
    if a.dtype == torch.bool:
        return a
    minus_one = _signed_minus_one(b)
    if minus_one is not None:  # x / -1 is -x, wrapping at the minimum (StableHLO's rule)
        return torch.where(minus_one, -a, torch.div(a, torch.where(minus_one, 1, b),
                                                    rounding_mode="trunc"))  # fmt: skip
    return torch.div(a, b, rounding_mode="trunc")


def _remainder(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if not _is_float(a) and a.dtype != torch.bool:
        minus_one = _signed_minus_one(b)
        if minus_one is not None:  # x % -1 is 0
            return torch.where(minus_one, 0, torch.fmod(a, torch.where(minus_one, 1, b)))
    return torch.fmod(a, b)


def _signed_minus_one(b: torch.Tensor) -> torch.Tensor | None:
    """Where a signed integer divisor is -1, or None if nowhere. Why: C's integer division
    traps (SIGFPE, the process dies) on the minimum value divided by -1, and torch's CPU
    kernels divide in C; so -1 divisors never reach them."""
    if torch.iinfo(b.dtype).min == 0:  # unsigned: no -1
        return None
    minus_one = b == -1
    return minus_one if bool(minus_one.any()) else None


def _round_afz(x: torch.Tensor) -> torch.Tensor:
    """Round half away from zero without the x + 0.5 precision trap."""
    t = torch.trunc(x)
    tie = (x - t).abs() == 0.5
    return torch.where(tie, t + torch.sign(x), torch.round(x))


def _cbrt(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * x.abs().pow(1.0 / 3.0)


def _not(x: torch.Tensor) -> torch.Tensor:
    return torch.logical_not(x) if x.dtype == torch.bool else torch.bitwise_not(x)


def _bits(t: torch.Tensor) -> int:
    return 1 if t.dtype == torch.bool else t.element_size() * 8


def _shift_left(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    over = (b < 0) | (b >= _bits(a))
    return torch.where(
        over, torch.zeros_like(a), torch.bitwise_left_shift(a, b.clamp(0, _bits(a) - 1))
    )


def _shift_right_arithmetic(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bitwise_right_shift(a, b.clamp(0, _bits(a) - 1))


def _shift_right_logical(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    n = _bits(a)
    over = (b < 0) | (b >= n)
    s = b.clamp(0, n - 1)
    shifted = torch.bitwise_right_shift(a, s)
    if a.dtype not in (torch.uint8, torch.bool):
        # clear the sign bits an arithmetic shift copied in: mask = (1 << (n - s)) - 1
        keep = torch.bitwise_left_shift(torch.ones_like(a), (n - s).clamp(max=n - 1)) - 1
        keep = torch.where(s == 0, torch.full_like(a, -1), keep)
        shifted = torch.bitwise_and(shifted, keep)
    return torch.where(over, torch.zeros_like(a), shifted)


def _popcnt(x: torch.Tensor) -> torch.Tensor:
    n = _bits(x)
    out = torch.zeros_like(x)
    for i in range(n):
        out = out + torch.bitwise_and(torch.bitwise_right_shift(x, i), 1)
    return out


def _clz(x: torch.Tensor) -> torch.Tensor:
    n = _bits(x)
    out = torch.full_like(x, n)
    for i in range(n):  # highest set bit wins: later (higher) i overwrite
        bit = torch.bitwise_and(torch.bitwise_right_shift(x, i), 1) != 0
        out = torch.where(bit, torch.full_like(x, n - 1 - i), out)
    return out


_unary(("stablehlo.negate",), torch.neg)
_unary(("stablehlo.abs",), torch.abs)
_unary(("stablehlo.sign",), torch.sign)
_unary(("stablehlo.exponential",), torch.exp)
_unary(("stablehlo.exponential_minus_one",), torch.expm1)
_unary(("stablehlo.log",), torch.log)
_unary(("stablehlo.log_plus_one",), torch.log1p)
_unary(("stablehlo.logistic",), torch.sigmoid)
_unary(("stablehlo.tanh",), torch.tanh)
_unary(("stablehlo.sqrt",), torch.sqrt)
_unary(("stablehlo.rsqrt",), torch.rsqrt)
_unary(("stablehlo.cbrt",), _cbrt)
_unary(("stablehlo.sine",), torch.sin)
_unary(("stablehlo.cosine",), torch.cos)
_unary(("stablehlo.tan",), torch.tan)
_unary(("stablehlo.floor",), torch.floor)
_unary(("stablehlo.ceil",), torch.ceil)
_unary(("stablehlo.round_nearest_even",), torch.round)
_unary(("stablehlo.round_nearest_afz",), _round_afz)
_unary(("stablehlo.not",), _not)
_unary(("stablehlo.is_finite",), torch.isfinite)
_unary(("stablehlo.popcnt",), _popcnt)
_unary(("stablehlo.count_leading_zeros",), _clz)
_unary(("stablehlo.real",), torch.real)
_unary(("stablehlo.imag",), torch.imag)
_unary(("chlo.erf", "stablehlo.erf"), torch.erf)
_unary(("chlo.erf_inv",), torch.erfinv)
_unary(("chlo.erfc",), torch.erfc)
_unary(("chlo.lgamma",), torch.lgamma)
_unary(("chlo.digamma",), torch.digamma)
_unary(("chlo.asin",), torch.asin)
_unary(("chlo.acos",), torch.acos)
_unary(("chlo.atan",), torch.atan)
_unary(("chlo.sinh",), torch.sinh)
_unary(("chlo.cosh",), torch.cosh)
_unary(("chlo.asinh",), torch.asinh)
_unary(("chlo.acosh",), torch.acosh)
_unary(("chlo.atanh",), torch.atanh)
_unary(("chlo.tan",), torch.tan)
_unary(("chlo.is_inf",), torch.isinf)
_unary(("chlo.is_pos_inf",), torch.isposinf)
_unary(("chlo.is_neg_inf",), torch.isneginf)

_binary(
    ("stablehlo.add", "chlo.broadcast_add"),
    lambda a, b: torch.logical_or(a, b) if a.dtype == torch.bool else a + b,
)
_binary(("stablehlo.subtract", "chlo.broadcast_subtract"), torch.sub)
_binary(
    ("stablehlo.multiply", "chlo.broadcast_multiply"),
    lambda a, b: torch.logical_and(a, b) if a.dtype == torch.bool else a * b,
)
_binary(("stablehlo.divide", "chlo.broadcast_divide"), _divide)
_binary(("stablehlo.remainder", "chlo.broadcast_remainder"), _remainder)
_binary(("stablehlo.power", "chlo.broadcast_power"), torch.pow)
_binary(("stablehlo.maximum", "chlo.broadcast_maximum"), torch.maximum)
_binary(("stablehlo.minimum", "chlo.broadcast_minimum"), torch.minimum)
_binary(("stablehlo.and", "chlo.broadcast_and"), torch.bitwise_and)
_binary(("stablehlo.or", "chlo.broadcast_or"), torch.bitwise_or)
_binary(("stablehlo.xor", "chlo.broadcast_xor"), torch.bitwise_xor)
_binary(("stablehlo.shift_left",), _shift_left)
_binary(("stablehlo.shift_right_arithmetic",), _shift_right_arithmetic)
_binary(("stablehlo.shift_right_logical",), _shift_right_logical)
_binary(("stablehlo.atan2", "chlo.broadcast_atan2"), torch.atan2)
_binary(("chlo.next_after", "stablehlo.next_after"), torch.nextafter)
_binary(("stablehlo.complex",), torch.complex)


def _total_order_key(x: torch.Tensor) -> torch.Tensor:
    """Map floats to ints whose order is IEEE totalOrder (-NaN < -inf < ... < NaN)."""
    itype = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    i = x.contiguous().view(itype).to(torch.int64)
    top = (1 << (x.element_size() * 8 - 1)) - 1
    return torch.where(i < 0, -(i & top) - 1, i)


def _unsigned_key(x: torch.Tensor) -> torch.Tensor:
    if x.dtype in (torch.bool, torch.uint8) or x.dtype in _WIDE_UNSIGNED:
        return x.to(torch.int64) if x.dtype in _WIDE_UNSIGNED else x
    n = _bits(x)
    i = x.to(torch.int64)
    return torch.where(i < 0, i + (1 << n), i) if n < 64 else i ^ (-(1 << 63))


_COMPARE = {
    "EQ": torch.eq,
    "NE": torch.ne,
    "GE": torch.ge,
    "GT": torch.gt,
    "LE": torch.le,
    "LT": torch.lt,
}


@register("stablehlo.compare", "chlo.broadcast_compare")
def compare(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    a, b = args
    direction = op.attributes["comparison_direction"]
    kind = op.attributes.get("compare_type", "NOTYPE")
    if kind == "TOTALORDER" and a.dtype.is_floating_point:
        a, b = _total_order_key(a), _total_order_key(b)
    elif kind == "UNSIGNED":
        a, b = _unsigned_key(a), _unsigned_key(b)
    else:
        a, b = _widen([a, b])
    return [_COMPARE[direction](a, b)]


@register("stablehlo.select")
def select(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    pred, a, b = args
    return [torch.where(pred, a, b)]


@register("stablehlo.clamp")
def clamp(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    lo, x, hi = _widen(args)
    return [_finish(op, torch.minimum(torch.maximum(x, lo), hi))]


@register("stablehlo.convert")
def convert(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    (x,) = args
    dt = out_dtype(op)
    if x.dtype == dt:
        return [x]
    if dt == torch.bool:
        return [x != 0]
    if x.dtype.is_complex and not dt.is_complex:
        x = x.real  # StableHLO: complex -> real keeps the real part
    if x.dtype.is_floating_point and dt in _EAGER_INT_CASTS:
        return [_float_to_int_as_eager(x, dt)]
    if x.dtype.is_floating_point and not (dt.is_floating_point or dt.is_complex):
        # float -> a wide unsigned int: prepare refuses float -> uint32 (eager's result
        # depends on the loop an element meets, see decomp/refusals/uint_casts.py) and Torch-MLIR
        # does not lower uint16 / uint64; for StableHLO from elsewhere, XLA's choice: NaN
        # gives 0 and out-of-range values saturate
        info = torch.iinfo(dt)
        hi = min(float(info.max), _LARGEST_F64_BELOW_2_63)
        x = torch.nan_to_num(x.to(torch.float64), nan=0.0).clamp(float(info.min), hi)
    return [x.to(dt)]


# float -> int as eager's CPU kernels convert on x86 (StableHLO leaves NaN and
# out-of-range values implementation-defined; our rule is eager's). The x86 truncating
# conversions (cvttss2si / cvttsd2si and their vector forms) give the "integer
# indefinite" value, the minimum of the 32- or 64-bit type, for NaN, +-inf and anything
# whose truncation does not fit; int16 / int8 / uint8 are converted through int32 and
# then wrap (keep the low bits), except float64 -> uint8, which goes through int64.
# Checked against eager on every float16 / bfloat16 bit pattern and millions of float32 /
# float64 ones (random bits, powers of two and their neighbours), in both the vectorised
# and the scalar loop, for every pair (tests/compiler/test_exact_casts.py).
_EAGER_INT_CASTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _float_to_int_as_eager(x: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    via = torch.int64 if dt == torch.int64 or (dt == torch.uint8 and x.dtype == torch.float64) \
        else torch.int32
    info = torch.iinfo(via)
    wide = x.to(torch.float64)  # exact for every float dtype
    fits = (wide > info.min - 1.0) & (wide < info.max + 1.0)  # false for NaN
    t = torch.where(fits, wide, 0.0).trunc().to(via)
    t = torch.where(fits, t, torch.tensor(info.min, dtype=via))
    return t.to(dt)  # int32 / int64 -> narrower: wraps, as the C cast does


@register("stablehlo.bitcast_convert")
def bitcast_convert(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    (x,) = args
    dt = out_dtype(op)
    x = x.contiguous()
    if x.dtype == torch.bool:
        x = x.to(torch.uint8)
    if dt == torch.bool:
        return [x.view(torch.uint8).reshape(out_shape(op)) != 0]
    return [x.reshape(-1).view(dt).reshape(out_shape(op))]
