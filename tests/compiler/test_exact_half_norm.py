"""float16/bfloat16 vector norms and F.normalize compiled = eager CPU, bit for bit
(decomp_half_norm.py): the lowering computed the norm in the half type (found by
tools/special_sweep.py on nn.functional.normalize)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401  (the neuron device and backend)

FNS = {
    "norm2": lambda x: torch.linalg.vector_norm(x, dim=1, keepdim=True),
    "norm1_all": lambda x: torch.linalg.vector_norm(x, 1),
    "norm3": lambda x: torch.linalg.vector_norm(x, 3, dim=(0, 2)),
    "normalize": lambda x: F.normalize(x, eps=1e-4),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(FNS))
def test_half_norm_bits(name: str, dtype: torch.dtype) -> None:
    x = (torch.randn(4, 6, 5, 7, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    fn = FNS[name]
    want = fn(x)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(x.to("neuron")).cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want), f"{int((got != want).sum())} of {want.numel()} differ"
