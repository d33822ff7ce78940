"""An ``.out`` call inside a replayed region is eager's kernel, as its functional call is.

``nn.LinearCrossEntropyLoss``'s chunked backward writes the input's gradient with
``torch.addmm(g, p, W, alpha=-1, out=g)``. The region holds that ``.out`` call, and
PyTorch's decomposition of it (``mm``, ``mul``, ``add``: two roundings) was taken instead
of eager's kernel: the ModuleInfo replay sweep over every sample found the gradient off
by an ulp in 11 of 857 samples (``decomp/eager_kernels._out_entry``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tests.adaptive_eager.harness import ReplayLog, assert_replays_eagers_bits


def _lce_loop(log: ReplayLog | None) -> Any:
    """``nn.LinearCrossEntropyLoss`` on a 1-d input: its backward writes the input's
    gradient with ``torch.addmm(g, p, W, alpha=-1, out=g)``, an ``.out`` call the region
    holds as such (the ModuleInfo replay sweep's sample 804, off by an ulp)."""
    def loop(device: str) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        m = nn.LinearCrossEntropyLoss(8, 4, reduction="sum", options=nn.LinearCrossEntropyOptions(
            allow_retain_graph=True)).to(device)  # the chunked op, with its own backward
        g = torch.Generator().manual_seed(3)
        out: dict[str, torch.Tensor] = {}
        for step in range(5):
            x = torch.randn(8, generator=g).to(device).requires_grad_()
            target = torch.randint(0, 4, (), generator=g).to(device)
            m.zero_grad()
            loss = m(x, target)
            loss.backward()
            out[f"loss{step}"], out[f"x.grad{step}"] = loss.detach().cpu(), x.grad.cpu()
            out[f"w.grad{step}"] = m.linear.weight.grad.cpu()
            if log is not None:
                log.mark(step)
        return out
    return loop


def test_an_out_call_in_a_region_is_eagers_kernel() -> None:
    assert_replays_eagers_bits(_lce_loop, no_divergence=True)
