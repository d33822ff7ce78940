"""Optimizer arithmetic (``addcdiv``, ``addcmul``) in the order and precision of ATen's
CPU kernels.

Adam and its relatives update every parameter with these ops. PyTorch's decompositions
compute ``self + value * (t1 / t2)`` and ``self + value * (t1 * t2)``, each step rounded in
the tensors' dtype. ATen's kernel (PointwiseOpsKernel.cpp) computes in the dtype's opmath
type (float32 for float16 / bfloat16, the value rounded to it):

- ``addcdiv``: ``self + (value * t1) / t2``. The lowering's order gave a different last
  bit on about a third of random float32 elements, and a finite result where eager
  overflows to inf (``value * t1`` overflows before the division).
- ``addcmul``: ``self + (value * t1) * t2`` in opmath, rounded once to the dtype: half
  precision inputs were rounded at every step.

``addcmul`` in float32 opmath (float32, float16, bfloat16): eager's AVX2 (and wider) build
contracts ``self + (value * t1) * t2`` into one fused multiply-add, its ``default`` build
does not (measured: 224 of 1000 random float32 elements differ between the two). Both
forms are written here, the fused one rounded once exactly (``foreach._fma32``),
and each is used only where a sample shows this CPU's eager computes it
(``host_numerics`` premises); otherwise the op is refused (``cpu-dependent-premise``).
float64 has no wider type to emulate a fused step in: only the unfused form, under its
premise. (The replay sweep listed ``addcmul`` as LAST-BIT, issue 22.) ``add`` with
``alpha`` is not here; ``lerp`` has its own module (``decomp/lerp.py``).

Integer and complex inputs keep the decompositions they had.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from torchneuron.compiler.decomp.foreach import _fma32
from torchneuron.compiler.decomp.host_numerics import (
    multiply_add_form,
    register_multiply_add,
    sample,
)
from torchneuron.compiler.decomp.registry import registrar

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
    dtype, _, v, (a, b, c) = got
    fused = multiply_add_form("aten.addcmul", dtype)
    if fused is None:
        return NotImplemented
    return (_fma32(b * v, c, a) if fused else a + (b * v) * c).to(dtype)


_VALUE = 0.3  # not a power of two: value * t1 rounds


def _premise_operands(dtype: torch.dtype) -> list[torch.Tensor]:
    return [sample((67,), seed, 3.0).to(dtype) for seed in (11, 12, 13)]


def _eager_addcmul(dtype: torch.dtype) -> Callable[[], torch.Tensor]:
    return lambda: torch.addcmul(*_premise_operands(dtype), value=_VALUE)


def _ours(dtype: torch.dtype, fused: bool) -> Callable[[], torch.Tensor]:
    def ours() -> torch.Tensor:
        got = _operands(*_premise_operands(dtype), _VALUE)
        assert got is not None
        _, _, v, (a, b, c) = got
        return (_fma32(b * v, c, a) if fused else a + (b * v) * c).to(dtype)

    return ours


register_multiply_add("aten.addcmul", (torch.float32, torch.float16, torch.bfloat16, torch.float64),
                      _eager_addcmul, _ours)

