"""Optimizer arithmetic (``addcdiv``, ``addcmul``) in the order and precision of ATen's
CPU kernels.

Adam and its relatives update every parameter with these ops. PyTorch's decompositions
compute ``self + value * (t1 / t2)`` and ``self + value * (t1 * t2)``, each step rounded in
the tensors' dtype. ATen's kernel (PointwiseOpsKernel.cpp) computes in the dtype's opmath
type (float32 for float16 / bfloat16, the value rounded to it):

- ``addcdiv``: ``self + (value * t1) / t2``. The lowering's order gave a different last
  bit on about a third of random float32 elements, and a finite result where eager
  overflows to inf (``value * t1`` overflows before the division).
- ``addcmul``: ``self + (value * t1) * t2`` in opmath with the last multiply-add fused
  (one rounding: GCC contracts it in both the vectorised loop and the scalar tail;
  checked against eager on random float32 / float64 elements), then rounded to the
  dtype. The lowering rounded twice (a different last bit on about one float32 element
  in seven) and rounded half precision inputs at every step. For float32 opmath the
  fused step is emulated exactly in float64 (``_fma32``); float64 has no wider type to
  emulate it in, so float64 ``addcmul`` is refused (``addcmul-float64-fma``).

Integer and complex inputs keep the decompositions they had.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from torchneuron.compiler.decomp_registry import registrar
from torchneuron.compiler.errors import PrepareError

__all__ = ["ADDC_DECOMPOSITIONS"]

aten = torch.ops.aten
ADDC_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(ADDC_DECOMPOSITIONS)
_HALVES = (torch.float16, torch.bfloat16)


def _operands(s: Any, t1: Any, t2: Any, value: Any
              ) -> tuple[torch.dtype, torch.dtype, float, list[torch.Tensor]] | None:
    """(result dtype, opmath dtype, value rounded to opmath, operands in opmath), or None
    when eager's kernel is not a float one."""
    if not all(isinstance(t, torch.Tensor) for t in (s, t1, t2)) \
            or isinstance(value, (torch.Tensor, complex)):
        return None
    _, dtype = elementwise_dtypes(s, t1, t2,
                                  type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    if not dtype.is_floating_point:
        return None
    opmath = torch.float32 if dtype in _HALVES else dtype
    v = float(value)
    if opmath == torch.float32:  # Scalar.to<float>(): the value rounded once, in Python
        v = struct.unpack("f", struct.pack("f", v))[0] if abs(v) < 3.5e38 else v
    return dtype, opmath, v, [t.to(dtype).to(opmath) for t in (s, t1, t2)]  # eager: common dtype first


@_register(aten.addcdiv.default)
def addcdiv(s: Any, t1: Any, t2: Any, *, value: Any = 1) -> Any:
    got = _operands(s, t1, t2, value)
    if got is None:
        return NotImplemented
    dtype, _, v, (a, b, c) = got
    return (a + (b * v) / c).to(dtype)


@_register(aten.addcmul.default)
def addcmul(s: Any, t1: Any, t2: Any, *, value: Any = 1) -> Any:
    got = _operands(s, t1, t2, value)
    if got is None:
        return NotImplemented
    dtype, opmath, v, (a, b, c) = got
    if opmath == torch.float64:
        if torch._guards.TracingContext.try_get() is not None:
            return NotImplemented  # a raise while AOTAutograd traces escapes torch.compile
        raise PrepareError(
            "aten.addcmul: eager fuses float64 addcmul's last multiply-add into one rounding "
            "(fma), which the lowering has no wider type to emulate; this region runs "
            "eagerly.", op="aten.addcmul", reason="addcmul-float64-fma")
    return _fma32(b * v, c, a).to(dtype)


def _fma32(p: torch.Tensor, q: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``p * q + c`` of float32 tensors with one rounding, as a fused multiply-add.

    In float64 the product is exact (24 + 24 bits) and the sum rounds once; rounding that
    to float32 could round twice, so the sum is made round-to-odd first (its last bit
    set where the sum was inexact, found with Knuth's TwoSum), which float32's nearest
    rounding then turns into the correctly rounded fused result. Infinities and NaN take
    the plain sum, which is what the fused operation gives for them."""
    big, small = p.double() * q.double(), c.double()
    r = big + small
    back = r - big
    err = (big - (r - back)) + (small - back)  # r + err == big + small exactly
    bits = r.view(torch.int64)
    even = 1 - torch.remainder(bits, 2)
    toward = torch.where((err > 0) == (r > 0), 1, -1)  # one ulp toward the exact sum
    nudge = torch.where(torch.isfinite(r) & (err != 0), toward * even, 0)
    return (bits + nudge).view(torch.float64).to(torch.float32)

