"""A replayed channels-last ``GroupNorm`` training step = eager CPU, bit for bit.

Why (issue 22): on the device ATen's derivative of ``native_group_norm`` handed the
backward kernel standard-format operands where the CPU's hands it channels-last ones,
so the device's eager steps, and the regions adaptive eager recorded from them, were off
(29 of 30 of a scale's gradients, 23 of 30 of the bias's, over five steps);
``device.group_norm_grad`` gives the kernel the CPU's layout, and the replayed regions
hold that call.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.adaptive_eager.harness import assert_replays_eagers_bits, sgd_loop

STEPS = 4


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gn = nn.GroupNorm(2, 6)
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, 6).reshape(1, 6, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn((x * self.w).contiguous(memory_format=torch.channels_last))


def test_replayed_channels_last_group_norm_step_is_eagers_bits() -> None:
    torch.manual_seed(0)
    model = _Net()
    assert_replays_eagers_bits(lambda log: sgd_loop(model, (2, 6, 3, 4), STEPS, log))
