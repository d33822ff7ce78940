"""Replayed training steps = eager CPU bit for bit: batch norm, gradient clipping, attention.

Why (issue 22, the bench's ``adaptive_warm`` rows of ``cnn`` and ``hf_gpt2``): a region
adaptive eager captured holds the ops the device ran, ``native_batch_norm`` (which
prepare turned into PyTorch's ``var_mean`` spelling), ``linalg_vector_norm`` from
``clip_grad_norm_`` (lowered as a sum of squares in another order) and, for attention,
the CPU's flash kernel (spelled as math attention). Each was off in the last bits from
the first program replay on, and verification, which allows float32 rounding, let it
through. A warm cache only made the program replay sooner. The loop here has all three;
every step's loss, every gradient and the final parameters and running statistics must
equal the same loop on plain CPU.
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
        self.bn = nn.BatchNorm1d(8)
        self.qkv = nn.Linear(8, 24)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.bn(x).transpose(1, 2)  # (b, 16 tokens, 8 channels)
        q, k, v = (z.unflatten(-1, (2, 4)).transpose(1, 2) for z in self.qkv(t).chunk(3, -1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(a.transpose(1, 2).flatten(2).mean(1))


def _loop(model: nn.Module, log: ReplayLog | None = None):
    def loop(device: str) -> dict[str, torch.Tensor]:
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(1)
        out: dict[str, list[torch.Tensor]] = {}
        for step in range(STEPS):
            x = torch.randn(4, 8, 16, generator=g).to(device)
            y = torch.randint(0, 4, (4,), generator=g).to(device)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            opt.step()
            loss.item()  # a sync ends the step's region, as a logging loop does
            keep_step(out, loss, m)
            if log is not None:
                log.mark(step)
        return kept(out, m)
    return loop


def test_replayed_batch_norm_clipping_and_attention_are_eagers_bits() -> None:
    torch.manual_seed(0)
    model = _Net()
    assert_replays_eagers_bits(lambda log: _loop(model, log))
