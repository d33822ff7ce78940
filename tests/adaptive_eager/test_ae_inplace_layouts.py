"""A replayed training step whose backward writes a transposed gradient in place = eager
CPU, its region never diverging.

Why (issue 22): ``vector_norm``'s derivative runs ``masked_fill_`` on its (here transposed)
gradient; prepare's functionalization wrote it as the out-of-place ``masked_fill``, whose
result is contiguous, so the ``softplus_backward`` behind it (eager's kernel) was handed a
contiguous gradient where eager's was transposed. The region's first replay, checked,
differed (at the linear layer's weight-gradient ``mm``) and the region was blacklisted:
a small model with AdamW ran eagerly from then on (``prepare/inplace_layouts.py``).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from tests.adaptive_eager.harness import ReplayLog, assert_replays_eagers_bits, keep_step, kept

STEPS = 4


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(11)
        self.lin = nn.Linear(11, 11)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(self.ln(x.transpose(1, 2))).transpose(1, 2)
        return torch.linalg.vector_norm(F.softplus(h) * F.log_softmax(h, 1), dim=1)


def _loop(model: nn.Module, log: ReplayLog | None = None):
    def loop(device: str) -> dict[str, torch.Tensor]:
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=0.01)
        g = torch.Generator().manual_seed(1)
        out: dict[str, list[torch.Tensor]] = {}
        for step in range(STEPS):
            x = torch.randn(4, 11, 9, generator=g).to(device)
            opt.zero_grad(set_to_none=True)
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
            loss.item()
            keep_step(out, loss, m)
            if log is not None:
                log.mark(step)
        return kept(out, m)
    return loop


def test_replayed_step_with_an_in_place_transposed_gradient_is_eagers_bits() -> None:
    torch.manual_seed(0)
    model = _Net()
    assert_replays_eagers_bits(lambda log: _loop(model, log), no_divergence=True)
