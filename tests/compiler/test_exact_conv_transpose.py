"""Transposed convolutions, and a convolution's input gradient, compiled = eager bit for bit
(interpreter/collapse/conv_transpose.py runs them with eager's own ``F.conv_transpose``).

Before, the interpreter ran them as a plain convolution of the stride-dilated input: 28
to 69% of the elements of each case below differed from eager in the last bits
(``conv_transpose3d`` was the replay sweep's MISMATCH, issue 22). A ``test_exact_`` file:
``test_bits_per_cpu_capability.py`` runs it again at every CPU capability the machine has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401  (the neuron device and backend)

CASES: dict[str, tuple[Callable[..., torch.Tensor], tuple[int, ...], tuple[int, ...],
                       dict[str, Any]]] = {
    "1d": (F.conv_transpose1d, (2, 4, 9), (4, 3, 3), {"stride": 2, "padding": 1}),
    "2d-stride1": (F.conv_transpose2d, (2, 4, 7, 6), (4, 3, 3, 3), {}),
    "2d-output-padding": (F.conv_transpose2d, (2, 4, 7, 6), (4, 3, 3, 3),
                          {"stride": 2, "padding": 1, "output_padding": 1}),
    "2d-dilation": (F.conv_transpose2d, (2, 4, 7, 6), (4, 3, 3, 3),
                    {"stride": 2, "padding": 2, "dilation": 2}),
    "3d": (F.conv_transpose3d, (1, 2, 3, 4, 5), (2, 3, 3, 3, 3), {"stride": 2, "padding": 1}),
}


def _inputs(case: str) -> list[torch.Tensor]:
    _, xs, ws, _ = CASES[case]
    g = torch.Generator().manual_seed(0)
    return [torch.randn(xs, generator=g), torch.randn(ws, generator=g)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_transpose_is_eagers_bit_for_bit(case: str) -> None:
    fn, _, _, kw = CASES[case]
    x, w = _inputs(case)
    want = fn(x, w, **kw)
    torch._dynamo.reset()
    got = torch.compile(lambda a, b: fn(a, b, **kw), backend="neuron")(
        x.to("neuron"), w.to("neuron")).cpu()
    assert torch.equal(got, want), f"{int((got != want).sum())} of {want.numel()} differ"


@pytest.mark.parametrize("conv", ["conv2d"])
def test_convolution_input_gradient_is_eagers_bit_for_bit(conv: str) -> None:
    """decomp_conv writes a convolution's input gradient as a transposed convolution."""
    fn = getattr(F, conv)
    g = torch.Generator().manual_seed(1)
    shape = (2, 4, 17) if conv == "conv1d" else (2, 4, 9, 8)
    x = torch.randn(shape, generator=g, requires_grad=True)
    w = torch.randn((3, 4, 3) if conv == "conv1d" else (3, 4, 3, 3), generator=g)
    fn(x, w, padding=1).square().sum().backward()
    xd = x.detach().to("neuron").requires_grad_()
    torch._dynamo.reset()
    torch.compile(lambda a, b: fn(a, b, padding=1), backend="neuron")(
        xd, w.to("neuron")).square().sum().backward()
    assert xd.grad is not None and x.grad is not None
    got = xd.grad.cpu()
    assert torch.equal(got, x.grad), f"{int((got != x.grad).sum())} differ"
