"""A replayed channels-last training step = eager CPU, its regions never diverging.

Why (issue 22): a region's eager kernels (``gelu``, batch norm) and its sums were handed
their operands contiguous where eager's were channels-last, so the program's numbers
differed from eager's; the checked first replay caught it and blacklisted the region
(6 of 7 small channels-last loops lost their replays that way), which ran eagerly from
then on. Now the program hands them eager's layout (``stablehlo/operand_layout.py``) and
the region replays with eager's bits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.adaptive_eager.harness import assert_replays_eagers_bits, sgd_loop

STEPS = 4


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(6)
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, 6).reshape(1, 6, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = (x * self.w).contiguous(memory_format=torch.channels_last)
        return self.bn(F.gelu(h))


def test_replayed_channels_last_step_is_eagers_bits_without_divergence() -> None:
    torch.manual_seed(0)
    model = _Net()
    assert_replays_eagers_bits(lambda log: sgd_loop(model, (4, 6, 9, 11), STEPS, log), no_divergence=True)
