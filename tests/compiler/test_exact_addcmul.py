"""``addcmul`` bit for bit with eager: the last multiply-add fused, as eager's CPU kernel.

Eager computes ``self + (value * t1) * t2`` in opmath with one rounding for the final
multiply-add (vectorised loop and scalar tail alike); the lowering rounded twice, a
different last bit on about one float32 element in seven. float32 opmath (float32,
float16, bfloat16) is now emulated exactly in float64, with round-to-odd against double
rounding; float64 is refused (``addcmul-float64-fma``) and runs eagerly.
"""

from __future__ import annotations

import pytest
import torch

from tests.compiler.exact import INF, NAN, matches_eager, torch_compile_matches_eager
from torchneuron.compiler import CompileError, compile_graph

HALF_PRECISION = (torch.float16, torch.bfloat16)


def _operands(dtype: torch.dtype, n: int = 20000) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    s, a, b = (torch.randn(n, generator=g, dtype=torch.float64) for _ in range(3))
    a[:8] = torch.tensor([3e38, 2.0, -1.0, NAN, INF, 1e-30, 1e30, -0.0])
    b[:8] = torch.tensor([1e-3, 0.0, -0.0, 1.0, 2.0, 1e-10, 1e10, 0.0])
    s[:8] = torch.tensor([0.0, -0.0, 1.0, 2.0, -INF, 0.0, -1e40, -0.0])
    return [t.to(dtype) for t in (s, a, b)]


def _double_rounding_cases() -> list[torch.Tensor]:
    """p * q + c whose float64 sum lands on a float32 midpoint it is not equal to:
    rounding the float64 sum to float32 gives the wrong neighbour."""
    p, q, c = 2 ** -12 * (1 + 2 ** -18), 2 ** -12 * (1 - 2 ** -18), 1 + 2 ** -23
    ps = torch.tensor([p, -p, p, -p, p * 2 ** -100, p] * 4, dtype=torch.float32)
    qs = torch.tensor([q, -q, -q, q, q, q * 2 ** 100] * 4, dtype=torch.float32)
    cs = torch.tensor([c, c, -c, -c, c * 2 ** -200, c * 2 ** -1] * 4, dtype=torch.float32)
    return [cs, ps, qs]


@pytest.mark.parametrize("value", (1, 0.37, -2.5, 1e-3))
@pytest.mark.parametrize("dtype", (torch.float32, *HALF_PRECISION), ids=str)
def test_addcmul_matches_eager_bitwise(dtype: torch.dtype, value: float) -> None:
    xs = _operands(dtype)
    matches_eager(lambda s, a, b: torch.addcmul(s, a, b, value=value), *xs)
    matches_eager(lambda s, a, b: torch.addcmul(s, a, b, value=value), *(x[:5] for x in xs))


def test_addcmul_near_float32_midpoints() -> None:
    cs, ps, qs = _double_rounding_cases()
    twice = (cs.double() + ps.double() * qs.double()).float()
    assert not torch.equal(twice, torch.addcmul(cs, ps, qs))  # the cases do matter
    matches_eager(lambda s, a, b: torch.addcmul(s, a, b), cs, ps, qs)


def test_float64_addcmul_is_refused() -> None:
    xs = _operands(torch.float64)
    with pytest.raises(CompileError) as info:
        compile_graph(lambda s, a, b: torch.addcmul(s, a, b, value=0.5), xs)
    assert info.value.reason == "addcmul-float64-fma"
    torch_compile_matches_eager(lambda s, a, b: torch.addcmul(s, a, b, value=0.5) * 2, *xs)


def test_addcmul_under_torch_compile_with_gradients() -> None:
    xs = [x.nan_to_num(0.0, 1.0, -1.0) for x in _operands(torch.float32, 500)]
    torch_compile_matches_eager(lambda s, a, b: torch.addcmul(s, a, b, value=0.37), *xs,
                                grad=True)
