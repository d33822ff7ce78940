"""TORCHNEURON_AE_VERIFY_REPLAYS: every replay checked against eager, not only the first.

An executable that turns wrong after its first (checked, good) replay is what a user sees
as a divergence after many steps. With the setting on it is caught at the replay where it
goes wrong, named in the log and in ``explain()``, the region is blacklisted and eager's
numbers are handed out; with it off (the first replay still checked) the wrong numbers
would reach the user, which is what makes the first test able to fail.
"""

from __future__ import annotations

import logging

import torch

import torchneuron.adaptive_eager as ae
import torchneuron.adaptive_eager.replay as replay_mod
from tests.adaptive_eager.harness import assert_same, run
from tests.adaptive_eager.test_ae_verify import _loop
from torchneuron.hardware.settings import get_value, override


def _wrong_after_first(real):
    """A launch whose first call is the real one and every later call is off by one."""
    calls: list[int] = []

    def launch(exe, inputs, core, index, guard_ns):
        calls.append(1)
        outs = real(exe, inputs, core, index, guard_ns)
        if len(calls) == 1:
            return outs
        for b in inputs:
            if b.is_floating_point():
                b.add_(1.0)  # the write-backs go wrong too
        return [o + 1.0 if isinstance(o, torch.Tensor) and o.is_floating_point() else o
                for o in outs]
    launch.calls = calls  # type: ignore[attr-defined]
    return launch


def test_off_by_default() -> None:
    assert get_value("ae_verify_replays") is False


def test_a_replay_gone_wrong_later_is_caught_and_refused(monkeypatch, caplog) -> None:
    tampered = _wrong_after_first(replay_mod.launch)
    monkeypatch.setattr(replay_mod, "launch", tampered)
    with override(verify=False, ae_verify_replays=True), \
            caplog.at_level(logging.WARNING, "torchneuron.adaptive_eager.verify"):
        eager = run(_loop, "neuron")
        adaptive = run(_loop, "neuron", adaptive=True)
        s = ae.stats()
    assert len(tampered.calls) >= 2  # a good replay, then the tampered one
    assert s["fallback_reasons"].get("verify-mismatch", 0) == 1
    refused = [r for r in ae.regions() if r.state is ae.State.BLACKLISTED]
    assert len(refused) == 1 and refused[0].reason is ae.Reason.VERIFY_MISMATCH
    region = refused[0]
    assert region.checked_replays >= 2 and "checked replay" in region.detail
    assert "nearest op" in region.detail  # the op whose output differs first
    text = ae.explain()
    assert f"region {region.key}" in text and "verify-mismatch" in text
    assert f"checked replay {region.checked_replays} of region {region.key}" in text
    assert any(f"region {region.key} diverged" in m for m in caplog.messages)
    assert_same(eager, adaptive, rtol=1e-5, atol=1e-5)  # eager's numbers, every step
    ae.reset()  # the mismatch was the point (conftest refuses any other)


def test_without_the_setting_the_later_wrong_replays_are_used(monkeypatch) -> None:
    """The check above can fail: with only the first replay checked, the executable that
    goes wrong afterwards hands out its wrong numbers."""
    tampered = _wrong_after_first(replay_mod.launch)
    monkeypatch.setattr(replay_mod, "launch", tampered)
    with override(verify=False, ae_verify_first_replay=True, ae_verify_replays=False):
        eager = run(_loop, "neuron")
        adaptive = run(_loop, "neuron", adaptive=True)
        s = ae.stats()
    assert len(tampered.calls) >= 2
    assert "verify-mismatch" not in s["fallback_reasons"]
    assert not torch.allclose(eager["m"], adaptive["m"])


def test_good_replays_all_checked_and_kept() -> None:
    with override(verify=False, ae_verify_replays=True):
        eager = run(_loop, "neuron")
        adaptive = run(_loop, "neuron", adaptive=True)
        s = ae.stats()
    replayed = [r for r in ae.regions() if r.replays]
    assert replayed and s["replays"] >= 3
    assert sum(r.checked_replays for r in replayed) == s["replays"] - s["first_tier_replays"]
    assert "verify-mismatch" not in s["fallback_reasons"]
    assert_same(eager, adaptive, rtol=1e-5, atol=1e-5)
