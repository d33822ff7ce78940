"""``tensor ** number`` compiled as eager's CPU kernel computes it, bit for bit.

Eager runs 2, 3, -1, -2 as products and reciprocals (``1e20 ** -2`` in float32 is 0.0
there, C ``pow`` gives a subnormal; random bases differ in the last ulp) and 0.5 / -0.5
as sqrt / rsqrt; the lowering used ``stablehlo.power``. float16 and tensor exponents take
C ``pow`` in eager, and must keep it.
"""

from __future__ import annotations

import pytest
import torch

from tests.compiler.exact import INF, NAN, matches_eager, torch_compile_matches_eager

FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
EXPONENTS = (2, 3, -1, -2, 2.0, -2.0, 3.0, 0.5, -0.5, 4, -3, 1, 0)
_SPECIAL = [0.0, -0.0, 1.0, -1.0, 1e20, -1e20, 1e-20, 1e-30, 3.3, 1.1, 7.77, INF, -INF, NAN,
            65000.0, 300.0, 1e-3, -2.5e-4]


def _bases(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    rand = torch.randn(2000, generator=g, dtype=torch.float64) * torch.logspace(-6, 6, 2000,
                                                                               dtype=torch.float64)
    return torch.cat([torch.tensor(_SPECIAL, dtype=torch.float64), rand]).to(dtype)


@pytest.mark.parametrize("exponent", EXPONENTS, ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_pow_by_a_python_number_matches_eager(dtype: torch.dtype, exponent: float) -> None:
    # (``torch.pow(x, exponent)`` traces to the same aten.pow.Tensor_Scalar graph)
    refused_ok = dtype == torch.bfloat16 and exponent == -0.5  # eager: position-dependent
    matches_eager(lambda x: x ** exponent, _bases(dtype), refused_ok=refused_ok)


def test_bfloat16_pow_minus_half_is_refused_or_matches_eager_by_position() -> None:
    """Eager's bfloat16 ``x ** -0.5`` differs between the vectorised body and the scalar
    tail of a chunk (30848: 0.0057067871 vs 0.0056762695): refused, so it runs eagerly."""
    for n in (1, 40, 64, 100):
        x = torch.full((n,), 30848.0, dtype=torch.bfloat16)
        matches_eager(lambda p: p ** -0.5, x, refused_ok=True)
        torch_compile_matches_eager(lambda p: p ** -0.5, x.clone())


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_pow_by_a_0d_tensor_keeps_c_pow_as_eager(dtype: torch.dtype) -> None:
    """A tensor exponent calls C pow in eager, even 0-d and even 2.0: no product there."""
    for e in (2.0, 3.0, -1.0, -2.0):
        matches_eager(torch.pow, _bases(dtype), torch.tensor(e, dtype=dtype))
        matches_eager(torch.pow, _bases(dtype), torch.tensor(int(e)))


@pytest.mark.parametrize("dtype", (torch.int8, torch.uint8, torch.int16, torch.int32,
                                   torch.int64), ids=str)
def test_integer_pow_matches_eager(dtype: torch.dtype) -> None:
    """Wrapping products for integer exponents; a float exponent promotes to float32
    and takes the float shortcuts there."""
    lo, hi = torch.iinfo(dtype).min, torch.iinfo(dtype).max
    x = torch.tensor([0, 1, 2, 3, 5, 7, 11, 13, 100, lo, hi, lo + 1, hi - 1]).to(dtype)
    for e in (2, 3, 4, 5, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5):
        matches_eager(lambda p, e=e: p ** e, x)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16), ids=str)
def test_torch_compile_pow_and_its_gradient_match_eager(dtype: torch.dtype) -> None:
    """Through Dynamo and AOTAutograd; the backward's ``pow(x, e - 1) * e`` too."""
    x = _bases(dtype)[:600]
    x = x[x.isfinite() & (x.abs() < 1e15)]
    for e in (2, 3, -1, -2):
        torch_compile_matches_eager(lambda p, e=e: p ** e, x, grad=True)
    torch_compile_matches_eager(lambda p: (p ** 2).mean() + p ** -2, x)
