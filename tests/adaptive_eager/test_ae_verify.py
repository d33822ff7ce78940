"""TORCHNEURON_VERIFY under adaptive eager: a region's first replay is checked against
eager; a region whose executable differs is refused with eager's numbers handed out."""

from __future__ import annotations

import torch

import torchneuron.adaptive_eager as ae
import torchneuron.adaptive_eager.replay as replay_mod
from tests.adaptive_eager.harness import assert_same, run
from torchneuron.hardware.settings import override

STEPS = 8


def _loop(device: str) -> dict:
    g = torch.Generator().manual_seed(3)
    w = torch.randn(16, 16, generator=g).to(device)
    m = torch.zeros(16, 16, device=device)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(8, 16, generator=g).to(device)
        h = torch.tanh(x @ w)
        for _ in range(6):
            h = torch.tanh(h @ w) * 0.5 + h
        m.mul_(0.9).add_(h.t() @ h, alpha=0.1)  # an in-place write into a region input
        losses.append(h.sum().item())
    return {"losses": torch.tensor(losses), "m": m}


def _wrong_launch(real):
    def launch(exe, inputs, core, index, guard_ns):
        outs = real(exe, inputs, core, index, guard_ns)
        for b in inputs:
            if b.is_floating_point():
                b.add_(1.0)  # a broken executable: its write-backs are off by one
        return [o + 1.0 if isinstance(o, torch.Tensor) and o.is_floating_point() else o
                for o in outs]
    return launch


def test_verified_replays_match_eager_and_are_trusted() -> None:
    with override(verify=True):
        eager = run(_loop, "neuron")
        adaptive = run(_loop, "neuron", adaptive=True)
        s = ae.stats()
    assert s["replays"] >= 3
    assert "verify-mismatch" not in s["fallback_reasons"]
    assert all(r.verified for r in ae.regions() if r.replays)
    assert_same(eager, adaptive, rtol=1e-5, atol=1e-5)


def test_a_wrong_executable_is_refused_with_eager_numbers(monkeypatch) -> None:
    monkeypatch.setattr(replay_mod, "launch", _wrong_launch(replay_mod.launch))
    with override(verify=True):
        eager = run(_loop, "neuron")
        adaptive = run(_loop, "neuron", adaptive=True)
        s = ae.stats()
    assert s["fallback_reasons"].get("verify-mismatch", 0) >= 1
    refused = [r for r in ae.regions() if r.state is ae.State.BLACKLISTED]
    assert refused and all(r.reason is ae.Reason.VERIFY_MISMATCH for r in refused)
    assert "verify-mismatch" in ae.explain()
    assert_same(eager, adaptive, rtol=1e-5, atol=1e-5)
    ae.reset()  # the mismatch was the point (conftest refuses any other)


def test_without_verify_the_broken_executable_would_be_used(monkeypatch) -> None:
    """The check above can fail: with verify off, the same broken launch changes results."""
    monkeypatch.setattr(replay_mod, "launch", _wrong_launch(replay_mod.launch))
    with override(verify=False, ae_verify_first_replay=False):
        eager = run(_loop, "neuron")
        adaptive = run(_loop, "neuron", adaptive=True)
    assert ae.stats()["replays"] >= 1
    assert not torch.allclose(eager["m"], adaptive["m"])


def _one_ulp_launch(real):
    def launch(exe, inputs, core, index, guard_ns):
        outs = real(exe, inputs, core, index, guard_ns)
        return [torch.nextafter(o, torch.full_like(o, float("inf")))
                if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in outs]
    return launch


def test_a_replay_one_ulp_off_is_refused_by_default(monkeypatch) -> None:
    """The default check of a region's first replay wants eager's bits: outputs one ulp
    off (within any tolerance; the check accepted them before) blacklist the region, and
    eager's numbers come out bit for bit."""
    monkeypatch.setattr(replay_mod, "launch", _one_ulp_launch(replay_mod.launch))
    with override(verify=False, ae_verify_first_replay=True):
        eager = run(_loop, "neuron")
        adaptive = run(_loop, "neuron", adaptive=True)
        s = ae.stats()
    assert s["fallback_reasons"].get("verify-mismatch", 0) >= 1, ae.explain()
    assert_same(eager, adaptive, rtol=0, atol=0)
    ae.reset()  # the mismatch was the point (conftest refuses any other)
