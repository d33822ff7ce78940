"""Integer floor division as eager computes it: exact, and raising on a zero divisor.

Torch-MLIR lowers ``div(a, b, rounding_mode="floor")`` (and ``floor_divide``, which
PyTorch decomposes into it) of integers through float64: ``floor(f64(a) / f64(b))``. Past
2**53 that is not the integer quotient ((2**62 + 12345) // 3 was off by 73), and a zero
divisor gave a number (0 or the type's maximum) where eager raises ZeroDivisionError. Here
the quotient is the integer truncating division, which the interpreter computes exactly
and which raises on a zero divisor as eager does, stepped down by one where the remainder
is non-zero and its sign differs from the divisor's (Python's floor rule, ATen's
``div_floor_integer``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp_registry import registrar

__all__ = ["INTDIV_DECOMPOSITIONS"]

aten = torch.ops.aten
INTDIV_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(INTDIV_DECOMPOSITIONS)


def _is_integer(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex() \
        and t.dtype != torch.bool


@_register(aten.div.Tensor_mode)
def div_mode(a: torch.Tensor, b: Any, *, rounding_mode: str | None) -> Any:
    if isinstance(b, int) and not isinstance(b, bool) and _is_integer(a):
        b = torch.scalar_tensor(b, dtype=a.dtype, device=a.device)  # ATen's result type
    if rounding_mode != "floor" or not (_is_integer(a) and _is_integer(b)):
        return NotImplemented
    q = torch.div(a, b, rounding_mode="trunc")
    r = a - q * b
    return q - ((r != 0) & ((r < 0) != (b < 0))).to(q.dtype)

