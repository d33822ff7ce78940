"""Compiled ``hypot`` against eager CPU, bit for bit on special and large values.

Found by ``tools/special_sweep.py``: the lowering's ``sqrt(a*a + b*b)`` overflowed to inf
at 1e30 in float32 (eager 1.4142e30), gave NaN for ``hypot(inf, nan)`` (eager inf), and
differed in the last bit from eager's correctly rounded float32 result. float64 is refused
(eager's own bits depend on its loop): tests/compiler/test_exact_hypot.py.
"""

from __future__ import annotations

import pytest
import torch

import torchneuron  # noqa: F401  (registers the backend and device)
from torchneuron.compiler import compile_graph

NAN, INF = float("nan"), float("inf")
_A = [1e30, -3e38, INF, NAN, -INF, 0.0, -0.0, 1e-40, 3.0, 5e-39, 2.5, 65504.0]
_B = [1e30, 3e38, NAN, -INF, 2.0, -0.0, 0.0, 1e-40, 4.0, -7e-39, -0.5, 65504.0]


def _operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(500, generator=g, dtype=torch.float64) * 10 ** torch.randint(
        -5, 6, (500,), generator=g)
    b = torch.randn(500, generator=g, dtype=torch.float64)
    a[: len(_A)], b[: len(_B)] = torch.tensor(_A), torch.tensor(_B)
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.bfloat16))
def test_hypot_matches_eager(dtype: torch.dtype) -> None:
    a, b = _operands(dtype)
    (got,) = compile_graph(torch.hypot, [a, b]).run([a, b])
    want = torch.hypot(a, b)
    assert got.dtype == want.dtype
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.isinf(), want.isinf())
    keep = ~want.isnan()
    assert torch.equal(got[keep], want[keep])


def test_hypot_under_torch_compile_matches_eager() -> None:
    a, b = _operands(torch.float32)
    torch._dynamo.reset()
    got = torch.compile(torch.hypot, backend="neuron")(a.to("neuron"), b.to("neuron")).cpu()
    want = torch.hypot(a, b)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~want.isnan()], want[~want.isnan()])
