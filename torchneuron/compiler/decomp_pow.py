"""``pow`` by a scalar 0.5 / -0.5 as eager computes it: ``sqrt`` / ``rsqrt``.

ATen's CPU ``pow(tensor, scalar)`` does not call C ``pow`` for these two exponents: it
runs ``sqrt`` and ``rsqrt``, which differ from ``pow`` on special bases. ``pow(-inf, 0.5)``
is inf in C but ``sqrt(-inf)`` is NaN, and ``pow(-0.0, 0.5)`` is 0.0 where ``sqrt`` keeps
the sign (-0.0); likewise ``rsqrt(-0.0)`` is -inf, not inf. The lowering kept
``stablehlo.power``, i.e. C's values. Only these two are rewritten. ATen also computes
2, 3, -1 and -2 by products (``x**-2`` as ``1 / (x * x)``), which differ from C's ``pow``
in the last ulp and where ``x * x`` overflows (float32 ``1e20 ** -2``: eager 0.0, the
lowering a subnormal); rewriting them would change the programs (and simulated times) of
every model squaring a value, so they are left as a known difference. A tensor exponent
always takes C ``pow``. float16 takes C ``pow`` in eager too (bfloat16 does not) and is left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp_registry import registrar

__all__ = ["POW_DECOMPOSITIONS"]

aten = torch.ops.aten
POW_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(POW_DECOMPOSITIONS)
_SQRT_DTYPES = (torch.float32, torch.float64, torch.bfloat16)  # float16 takes C pow in eager


@_register(aten.pow.Tensor_Scalar)
def pow_tensor_scalar(x: torch.Tensor, exponent: Any) -> Any:
    if x.dtype not in _SQRT_DTYPES or isinstance(exponent, complex):
        return NotImplemented
    if exponent == 0.5:
        return torch.sqrt(x)
    if exponent == -0.5:
        return torch.rsqrt(x)
    return NotImplemented
