"""A float16 / bfloat16 tensor times or over a scalar, compiled, bit for bit as eager CPU.

Found while checking the sweep's scans: eager reads the scalar (a Python number or a 0-d
tensor of a wider float type) at float32 and rounds once; the lowering rounded the scalar
to the half type first (``bfloat16 x * 1e4`` multiplied by 9984).
"""

from __future__ import annotations

import pytest
import torch

import torchneuron  # noqa: F401  (registers the backend and device)
from torchneuron.compiler import compile_graph

NAN, INF = float("nan"), float("inf")


def _scaled(x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (x * 1e4, 0.01 * x, x / 3.3, 1 - x * 0.3, x * s, x / s, x * 7)


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
def test_half_tensor_and_scalar_match_eager_bitwise(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, generator=g).to(dtype)
    x[:6] = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 6e4]).to(dtype)
    s = torch.tensor(0.123456789, dtype=torch.float64)
    got = compile_graph(_scaled, [x, s]).run([x, s])
    for i, (g_, w) in enumerate(zip(got, _scaled(x, s), strict=True)):
        assert g_.dtype == w.dtype
        assert torch.equal(g_.isnan(), w.isnan()), i
        keep = ~w.isnan()
        assert torch.equal(g_[keep], w[keep]), (i, (g_[keep] != w[keep]).sum())
        assert torch.equal(g_[keep].signbit(), w[keep].signbit()), i


def test_half_scaling_under_torch_compile_matches_eager() -> None:
    x = torch.randn(64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    fn = lambda a: (a * 0.01) / 3.3  # noqa: E731
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(x.to("neuron")).cpu()
    assert torch.equal(got, fn(x))
