"""float16/bfloat16 convolutions compiled = eager CPU, bit for bit (decomp_half_conv.py):
the lowering convolved in the half type (found by tools/special_sweep.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401  (the neuron device and backend)

CASES = {
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), (4, 6, 9, 9), (5, 6, 3, 3)),
    "depthwise": (lambda x, w, b: F.conv2d(x, w, b, groups=6), (4, 6, 9, 9), (6, 1, 3, 3)),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, stride=2), (4, 6, 17), (5, 6, 3)),
    "conv3d": (lambda x, w, b: F.conv3d(x, w, b), (2, 3, 5, 5, 5), (4, 3, 2, 2, 2)),
    "transposed": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2),
                   (2, 6, 5, 5), (6, 4, 3, 3)),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_half_conv_bits(case: str, dtype: torch.dtype) -> None:
    fn, xs, ws = CASES[case]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(xs, generator=g).to(dtype)
    w = torch.randn(ws, generator=g).to(dtype)
    b = torch.randn(ws[1] if case == "transposed" else ws[0], generator=g).to(dtype)
    want = fn(x, w, b)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(x.to("neuron"), w.to("neuron"),
                                              b.to("neuron")).cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want), f"{int((got != want).sum())} of {want.numel()} differ"
