"""Foreach ops (``_foreach_mul``, ``_foreach_add``, ``_foreach_addcmul``,
``_foreach_addcdiv``, and the rest of what ``torch.optim``'s ``foreach=True`` steps, EMA
(``swa_utils``' ``_foreach_lerp_``) and ``clip_grad_norm_(foreach=True)`` call: ``lerp``,
``sqrt``, ``div``, ``sub``, ``maximum``/``minimum``, ``neg``, ``reciprocal``, ``abs``,
``zero``, ``norm``) as the per-tensor ops ATen's CPU kernels run, with eager's bits.

Why: Torch-MLIR has no lowering for any ``_foreach_`` op, so an EMA of weights
(``_foreach_mul_(ema, d); _foreach_add_(ema, params, alpha=1 - d)``) or a foreach
optimizer step ran eagerly between adaptive eager's regions and broke torch.compile's
graphs. ATen's CPU foreach kernels are its "slow path": one call of the per-tensor op for
each tensor (``t.mul(scalar)``, ``t.add(other, alpha)``, ``t.addcmul(t1, t2, scalars[i])``,
the ``Tensor`` overloads reading their scalars from a CPU tensor first), so each entry
below writes the per-tensor op out in that op's own arithmetic:

- ``mul`` and ``add`` without ``alpha`` (or ``alpha == 1``): the per-tensor aten op,
  whose lowering is one rounding, as eager's.
- ``add`` with ``alpha`` and ``addcmul`` by a number: the per-tensor aten op, which is
  eager's own kernel in the program (``decomp/eager_kernels.py``): its multiply-add is
  fused in ATen's AVX2 and AVX-512 builds and not in its ``default`` build, and only the
  kernel itself is right on both (an exact fused emulation here gave 12 of 1000 float32
  sums other bits than eager at ``ATEN_CPU_CAPABILITY=default``).
- ``addcmul`` by the ``Tensor`` overload's scalars (graph inputs, no number to hand
  eager's kernel): ``self + value * t1 * t2`` in opmath (float32 for float16 /
  bfloat16), fused (``_fma32``) or not as this CPU's eager computes it
  (``host_numerics.multiply_add_form``, the premises of ``decomp/addc.py``), refused
  where neither form is eager's.
- ``addcdiv``: decomp/addc.py's entry, already eager's arithmetic (no fused step).
- the others: the per-tensor aten op ATen's slow path calls (``at::lerp``, ``t.div(s)``,
  ``at::linalg_vector_norm(t, ord, dtype=)``, ...), each lowered as that op is.

The fused multiply-add is computed exactly (``_fma32``): the float32 product in float64
is exact, the sum rounded to odd there, then rounded to float32, which is the single
rounding of the fused instruction (round-to-odd makes the double rounding innocent).

Refused (the entry returns ``NotImplemented``: the op stays, is refused by the lowering
and runs eagerly): ``alpha != 1`` on float16 / bfloat16, whose vector body and scalar
tail round differently in eager (which element is in the tail depends on the CPU's
vector width and thread count); float16 / bfloat16 ``_foreach_mul`` by numbers (eager's
in-place form rounds the number to the tensor's dtype, its out-of-place form does not); float64 ``addcmul`` and ``add`` with ``alpha`` (a fused
float64 multiply-add needs wider arithmetic than the device has); complex tensors; a
value outside float32's range for float32 tensors (eager raises converting it).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from torchneuron.compiler.decomp.host_numerics import multiply_add_form
from torchneuron.compiler.decomp.registry import registrar

__all__ = ["FOREACH_DECOMPOSITIONS"]

aten = torch.ops.aten
FOREACH_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(FOREACH_DECOMPOSITIONS)
_HALVES = (torch.float16, torch.bfloat16)
_F32 = (torch.float32, *_HALVES)  # opmath float32
_F32_MAX = 3.4028234663852886e38


def _fma32(a: torch.Tensor, b: torch.Tensor | float, c: torch.Tensor) -> torch.Tensor:
    """``a * b + c`` rounded once to float32, as the FMA instruction gives it (float32
    operands). The product is exact in float64; the sum's rounding error (two-sum) says
    whether float64's result is exact; an inexact sum is made odd by one step towards
    the exact value (round to odd), after which rounding to float32 is the single
    correct rounding."""
    a64 = a.to(torch.float64)
    b64 = b.to(torch.float64) if isinstance(b, torch.Tensor) else b
    p = a64 * b64
    c64 = c.to(torch.float64)
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    bits = s.view(torch.int64)
    even = (bits & 1) == 0
    nudge = (err != 0) & even & torch.isfinite(s)
    grow = (err > 0) == (s > 0)  # the exact value is further from zero than s
    odd = torch.where(grow, bits + 1, bits - 1).view(torch.float64)
    return torch.where(nudge, odd, s).to(torch.float32)


def _scalar_f32(v: Any) -> float | None:
    """``Scalar.to<float>()``: a Python number rounded to float32; None where eager raises
    (finite, beyond float32's range) or the number is complex."""
    if isinstance(v, complex):
        return None
    v = float(v)
    if math.isfinite(v) and abs(v) > _F32_MAX:
        return None
    return struct.unpack("f", struct.pack("f", v))[0] if math.isfinite(v) else v


def _dtype(*ts: torch.Tensor) -> torch.dtype:
    """The dtype TensorIterator computes in (a 0-d tensor does not promote a float
    tensor of its category)."""
    return elementwise_dtypes(*ts, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]


def _unit(alpha: Any) -> bool:
    return not isinstance(alpha, bool) and alpha == 1


# --- add with alpha -----------------------------------------------------------------


def _add_alpha(t: torch.Tensor, o: torch.Tensor, alpha: Any) -> torch.Tensor:
    """``t.add(o, alpha)``: the per-tensor op eager's foreach kernel calls (with a float
    ``alpha`` other than 1 it is eager's own add kernel in the program,
    ``decomp/eager_kernels.py``)."""
    return aten.add.Tensor(t, o, alpha=alpha)


def _adds(ts: Sequence[torch.Tensor], others: Sequence[torch.Tensor], alpha: Any) -> Any:
    if not _unit(alpha):  # refused (module docstring): decided before any op is traced
        if _scalar_f32(alpha) is None:
            return NotImplemented
        for t, o in zip(ts, others, strict=True):
            dtype = _dtype(t, o)
            if dtype != torch.float32 and (dtype.is_floating_point or dtype.is_complex):
                return NotImplemented
    return [_add_alpha(t, o, alpha) for t, o in zip(ts, others, strict=True)]


@_register(aten._foreach_add.List)
def foreach_add_list(self: list[torch.Tensor], other: list[torch.Tensor], *, alpha: Any = 1) -> Any:
    return _adds(self, other, alpha)


@_register(aten._foreach_add.Tensor)
def foreach_add_tensor(self: list[torch.Tensor], other: torch.Tensor, *, alpha: Any = 1) -> Any:
    return _adds(self, [other] * len(self), alpha)


@_register(aten._foreach_add.Scalar)
def foreach_add_scalar(self: list[torch.Tensor], scalar: Any) -> Any:
    return [aten.add.Tensor(t, scalar) for t in self]


@_register(aten._foreach_add.ScalarList)
def foreach_add_scalar_list(self: list[torch.Tensor], scalars: list[Any]) -> Any:
    return [aten.add.Tensor(t, s) for t, s in zip(self, scalars, strict=True)]


# --- mul ----------------------------------------------------------------------------


def _muls(ts: Sequence[torch.Tensor], scalars: Sequence[Any]) -> Any:
    """Per tensor ``t.mul(s)``; float16 / bfloat16 refused: eager's in-place
    ``_foreach_mul_`` rounds the number to the tensor's dtype first, its out-of-place
    form does not, and the functional graph no longer says which one the user called."""
    if any(t.dtype in _HALVES for t in ts):
        return NotImplemented
    return [aten.mul.Tensor(t, s) for t, s in zip(ts, scalars, strict=True)]


@_register(aten._foreach_mul.Scalar)
def foreach_mul_scalar(self: list[torch.Tensor], scalar: Any) -> Any:
    return _muls(self, [scalar] * len(self))


@_register(aten._foreach_mul.ScalarList)
def foreach_mul_scalar_list(self: list[torch.Tensor], scalars: list[Any]) -> Any:
    return _muls(self, scalars)


@_register(aten._foreach_mul.List)
def foreach_mul_list(self: list[torch.Tensor], other: list[torch.Tensor]) -> Any:
    return [aten.mul.Tensor(t, o) for t, o in zip(self, other, strict=True)]


@_register(aten._foreach_mul.Tensor)
def foreach_mul_tensor(self: list[torch.Tensor], other: torch.Tensor) -> Any:
    return [aten.mul.Tensor(t, other) for t in self]


# --- addcmul / addcdiv --------------------------------------------------------------


def _addc_refused(kind: str, s: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor,
                  value: Any) -> bool:
    """Whether ``_addc`` cannot give eager's bits for these operands (module docstring)."""
    dtype = _dtype(s, t1, t2)
    if dtype.is_complex:
        return True
    if isinstance(value, torch.Tensor):  # the Tensor overload's scalars
        # float64 scalars may lie beyond float32, where eager raises converting them
        return value.dtype not in _F32 or not (dtype in _F32 or (dtype == torch.float64
                                                                 and kind == "div"))
    if not dtype.is_floating_point or kind == "div":
        return False
    return dtype not in _F32 or _scalar_f32(value) is None


def _addc(kind: str, s: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, value: Any) -> Any:
    """``s.addcmul(t1, t2, value)`` / ``s.addcdiv(...)`` per ATen's kernel, ``value`` a
    number or a 0-d tensor (an element of the ``Tensor`` overload's scalars)."""
    dtype = _dtype(s, t1, t2)
    if not isinstance(value, torch.Tensor) and (kind == "div" or not dtype.is_floating_point):
        # decomp.addc's entries: eager's order for floats, the lowering for integers
        op = aten.addcmul.default if kind == "mul" else aten.addcdiv.default
        return op(s, t1, t2, value=value)
    if not isinstance(value, torch.Tensor):  # a float addcmul: eager's own kernel
        return aten.addcmul.default(s, t1, t2, value=value)
    opmath = torch.float32 if dtype in _F32 else dtype
    v = value.to(opmath)
    a, b, c = (x.to(dtype).to(opmath) for x in (s, t1, t2))  # eager: common dtype first
    if kind == "div":
        return (a + (b * v) / c).to(dtype)
    # the Tensor overload's value is a graph input, no number for eager's kernel: the
    # multiply-add in the form this CPU's eager computes (decided in _foreach_addc)
    fused = multiply_add_form("aten.addcmul", dtype)
    return (_fma32(b * v, c, a) if fused else a + (b * v) * c).to(dtype)


def _foreach_addc(kind: str, s: list[torch.Tensor], t1: list[torch.Tensor],
                  t2: list[torch.Tensor], scalars: Any) -> Any:
    if isinstance(scalars, torch.Tensor):  # the Tensor overload: one element per tensor
        if scalars.dim() != 1 or scalars.shape[0] != len(s):
            return NotImplemented  # eager's own error
        values: list[Any] = list(scalars.unbind(0))
    else:
        values = list(scalars)
    rows = list(zip(s, t1, t2, values, strict=True))
    if any(_addc_refused(kind, *row) for row in rows):  # decided before any op is traced
        return NotImplemented
    if kind == "mul" and isinstance(scalars, torch.Tensor) and any(
            multiply_add_form("aten.addcmul", _dtype(*row[:3])) is None for row in rows):
        return NotImplemented  # this CPU's eager computes neither form (host_numerics)
    return [_addc(kind, *row) for row in rows]


@_register(aten._foreach_addcmul.Scalar)
def foreach_addcmul_scalar(self: list[torch.Tensor], tensor1: list[torch.Tensor],
                           tensor2: list[torch.Tensor], value: Any = 1) -> Any:
    return _foreach_addc("mul", self, tensor1, tensor2, [value] * len(self))


@_register(aten._foreach_addcmul.ScalarList, aten._foreach_addcmul.Tensor)
def foreach_addcmul_list(self: list[torch.Tensor], tensor1: list[torch.Tensor],
                         tensor2: list[torch.Tensor], scalars: Any) -> Any:
    return _foreach_addc("mul", self, tensor1, tensor2, scalars)


@_register(aten._foreach_addcdiv.Scalar)
def foreach_addcdiv_scalar(self: list[torch.Tensor], tensor1: list[torch.Tensor],
                           tensor2: list[torch.Tensor], value: Any = 1) -> Any:
    return _foreach_addc("div", self, tensor1, tensor2, [value] * len(self))


@_register(aten._foreach_addcdiv.ScalarList, aten._foreach_addcdiv.Tensor)
def foreach_addcdiv_list(self: list[torch.Tensor], tensor1: list[torch.Tensor],
                         tensor2: list[torch.Tensor], scalars: Any) -> Any:
    return _foreach_addc("div", self, tensor1, tensor2, scalars)


# --- the rest of the optimizers' foreach ops: the per-tensor op of ATen's slow path ------


def _by_number(op: Any, ts: Sequence[torch.Tensor], scalars: Sequence[Any]) -> Any:
    """Per tensor ``op(t, s)`` with a number ``s``. (Unlike ``mul_``, eager's in-place
    ``div_``, ``sub_``, ``clamp_min_`` and ``clamp_max_`` give the out-of-place bits in
    float16 / bfloat16 too: ``tests/compiler/test_decomp_foreach.py`` checks both.)"""
    return [op(t, s) for t, s in zip(ts, scalars, strict=True)]


def _register_binary(name: str, op: Any) -> None:
    """``_foreach_<name>``'s Scalar, ScalarList, List (and Tensor) overloads."""
    packet = getattr(aten, f"_foreach_{name}")
    _register(packet.Scalar)(lambda self, scalar: _by_number(op, self, [scalar] * len(self)))
    _register(packet.ScalarList)(lambda self, scalars: _by_number(op, self, scalars))
    _register(packet.List)(lambda self, other: [op(t, o) for t, o in zip(self, other, strict=True)])
    if "Tensor" in packet.overloads():
        _register(packet.Tensor)(lambda self, other: [op(t, other) for t in self])


_register_binary("div", aten.div.Tensor)
_register_binary("maximum", lambda t, o: aten.clamp_min.default(t, o)
                 if not isinstance(o, torch.Tensor) else aten.maximum.default(t, o))
_register_binary("minimum", lambda t, o: aten.clamp_max.default(t, o)
                 if not isinstance(o, torch.Tensor) else aten.minimum.default(t, o))


@_register(aten._foreach_sub.Scalar)
def foreach_sub_scalar(self: list[torch.Tensor], scalar: Any) -> Any:
    return _by_number(aten.sub.Tensor, self, [scalar] * len(self))


@_register(aten._foreach_sub.ScalarList)
def foreach_sub_scalar_list(self: list[torch.Tensor], scalars: list[Any]) -> Any:
    return _by_number(aten.sub.Tensor, self, scalars)


@_register(aten._foreach_sub.List)
def foreach_sub_list(self: list[torch.Tensor], other: list[torch.Tensor], *, alpha: Any = 1) -> Any:
    if not _unit(alpha):  # a multiply-add, as ``add`` with ``alpha``: not taken here
        return NotImplemented
    return [aten.sub.Tensor(t, o) for t, o in zip(self, other, strict=True)]


@_register(aten._foreach_lerp.Scalar)
def foreach_lerp_scalar(self: list[torch.Tensor], tensors1: list[torch.Tensor], weight: Any) -> Any:
    return [aten.lerp.Scalar(s, e, weight) for s, e in zip(self, tensors1, strict=True)]


@_register(aten._foreach_lerp.ScalarList)
def foreach_lerp_scalar_list(self: list[torch.Tensor], tensors1: list[torch.Tensor],
                             weight: list[Any]) -> Any:
    return [aten.lerp.Scalar(s, e, w) for s, e, w in zip(self, tensors1, weight, strict=True)]


@_register(aten._foreach_lerp.List)
def foreach_lerp_list(self: list[torch.Tensor], tensors1: list[torch.Tensor],
                      weights: list[torch.Tensor]) -> Any:
    return [aten.lerp.Tensor(s, e, w) for s, e, w in zip(self, tensors1, weights, strict=True)]


def _register_unary(name: str, op: Any) -> None:
    _register(getattr(aten, f"_foreach_{name}").default)(lambda self: [op(t) for t in self])


for _name, _op in (("sqrt", aten.sqrt.default), ("neg", aten.neg.default),
                   ("reciprocal", aten.reciprocal.default), ("abs", aten.abs.default),
                   ("zero", aten.zeros_like.default)):
    _register_unary(_name, _op)


@_register(aten._foreach_norm.Scalar)
def foreach_norm(self: list[torch.Tensor], ord: Any = 2, dtype: torch.dtype | None = None) -> Any:
    return [aten.linalg_vector_norm.default(t, ord, dtype=dtype) for t in self]
