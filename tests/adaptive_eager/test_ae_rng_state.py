"""A device generator's state read or replaced inside a replayed region.

Why: adaptive eager defers a region's random ops and draws their numbers when the
region's executable runs. ``torch.neuron.get_rng_state`` / ``set_rng_state`` and
``manual_seed`` in the middle of a region (``torch.utils.checkpoint`` saves and restores
the state around its recomputation) must see and change the stream as eager does, so
they are sync points. Each loop runs eagerly and under adaptive eager on the device,
from the same seed; the replayed steps must give eager's numbers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import torchneuron.adaptive_eager as ae

STEPS = 8


def _work(t: torch.Tensor, p: float) -> torch.Tensor:
    """A dozen ops around a dropout: enough for a region of its own between syncs."""
    for _ in range(4):
        t = torch.tanh(t * 1.5 + 0.25) - 0.5
    return F.dropout(t, p) * 3 + 1


def _both(loop: Callable[[], list]) -> tuple[list, list, dict]:
    torch.manual_seed(0)
    eager = loop()
    ae.reset()
    ae.enable()
    try:
        torch.manual_seed(0)
        adaptive = loop()
        stats = ae.stats()
    finally:
        ae.disable()
    return eager, adaptive, stats


def test_state_saved_and_restored_inside_a_region_redraws_the_same_mask() -> None:
    def loop() -> list:
        x = torch.ones(64, device="neuron")
        out = []
        for _ in range(STEPS):
            y = _work(x, 0.5)
            state = torch.neuron.get_rng_state()
            a = _work(y, 0.5)
            torch.neuron.set_rng_state(state)
            b = _work(y, 0.5)
            out.append((a.cpu(), b.cpu()))
        return out

    eager, adaptive, stats = _both(loop)
    assert stats["replays"] > 0
    for (ea, eb), (aa, ab) in zip(eager, adaptive, strict=True):
        assert torch.equal(aa, ab)  # the restored state drew the same mask
        assert torch.equal(ea, aa) and torch.equal(eb, ab)


def test_reseeding_inside_a_region_gives_eagers_draws() -> None:
    def loop() -> list:
        x = torch.ones(64, device="neuron")
        out = []
        for i in range(STEPS):
            y = _work(x, 0.5)
            torch.manual_seed(i)
            z = _work(y, 0.5)
            out.append((y.cpu(), z.cpu()))
        return out

    eager, adaptive, stats = _both(loop)
    assert stats["replays"] > 0
    for e, a in zip(eager, adaptive, strict=True):
        assert torch.equal(e[0], a[0]) and torch.equal(e[1], a[1])


def test_checkpointed_dropout_gradients_match_eager_on_replayed_steps() -> None:
    def loop() -> list:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            m = torch.nn.Linear(6, 6)
        m = m.to("neuron")
        torch.neuron.manual_seed(1)
        out = []
        for _ in range(STEPS):
            x = torch.linspace(-1, 1, 24, device="neuron").reshape(4, 6)
            h = checkpoint(lambda t: F.dropout(torch.tanh(m(t)), 0.5) * 2, x,
                           use_reentrant=False)  # fmt: skip
            loss = (F.dropout(h, 0.2) ** 2).sum()
            loss.backward()
            out.append((loss.detach().cpu(), m.weight.grad.cpu()))
            m.weight.grad = None
        return out

    eager, adaptive, stats = _both(loop)
    assert stats["replays"] > 0
    for (el, eg), (al, ag) in zip(eager, adaptive, strict=True):
        torch.testing.assert_close(al, el)
        torch.testing.assert_close(ag, eg)
