"""PyTorch's Python custom ops (``torch_nn::``, behind ``F.linear_cross_entropy`` with
chunking options) compile through their own implementation (decomp_custom) and match
eager; the graph used to reach the compile worker naming an op it could not import."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

from tests.compiler.compiled import assert_compiles_to_eager


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_chunked_linear_cross_entropy_matches_eager(reduction: str) -> None:
    torch.manual_seed(0)
    x, w, b = torch.randn(5, 4), torch.randn(7, 4), torch.randn(7)
    t = torch.tensor([0, 6, 3, 3, 1])
    opts = LinearCrossEntropyOptions(batch_chunk_size=2)

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.linear_cross_entropy(x, w, t, linear_bias=b, reduction=reduction, options=opts)

    assert_compiles_to_eager(fn, [x, w, b, t], rtol=1e-5, atol=1e-6)
