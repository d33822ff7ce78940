"""Convolution gradients replayed by adaptive eager = eager CPU bit for bit (issue 22).

The replayed regions hold the backward's convolutions, so every step's weight gradient
went through the compiler's lowering: before ``collapse/conv_weight.py`` 100 to 600
elements of each model's stacked weight gradients differed from eager, and the grouped
transposed convolution's gradients too. With biases (and a Flatten, whose gradient is
reshaped once for the bias and once for the weight), every gradient differed, as the
forward's bias add was not eager's fused one (``collapse/conv_bias.py``).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from tests.adaptive_eager.harness import ReplayLog, assert_replays_eagers_bits

STEPS = 5


def _model(bias: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=bias), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2, bias=bias), torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=4,
                                 bias=bias), torch.nn.Flatten())


def _loop(model: torch.nn.Module, log: ReplayLog | None = None):
    def loop(device: str) -> dict[str, torch.Tensor]:
        m = copy.deepcopy(model).to(device)
        g = torch.Generator().manual_seed(1)
        grads: dict[str, list[torch.Tensor]] = {}
        for step in range(STEPS):
            x = torch.randn(2, 3, 8, 8, generator=g).to(device)
            y = torch.randn(2, 4 * 8 * 8, generator=g).to(device)
            for p in m.parameters():
                p.grad = None
            loss = F.mse_loss(m(x), y)
            loss.backward()
            loss.item()
            for k, p in m.named_parameters():
                assert p.grad is not None
                grads.setdefault(k, []).append(p.grad.detach().clone())
            if log is not None:
                log.mark(step)
        return {k: torch.stack(v) for k, v in grads.items()}
    return loop


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_replayed_convolution_gradients_are_eagers_bit_for_bit(bias: bool) -> None:
    model = _model(bias)
    assert_replays_eagers_bits(lambda log: _loop(model, log), settings={})
