"""Simulated time of the zoo's training loops is exactly what was recorded.

Why pasted numbers here, against the rule: this is a regression guard, not a check of
behaviour. Work on the simulator's wall-clock speed (cached per-signature work and
cost, the prepared executable interpreter) must not change one simulated nanosecond,
and only a record from before such work can show that. The record is made by
``tests/hardware/record_sim_times.py``; regenerate it only for an intended cost-model
change, and say so in the commit.
"""

from __future__ import annotations

import json

import pytest

from tests.hardware import record_sim_times as rec

_RECORDED = json.loads(rec.PATH.read_text())


def _params() -> list:
    out = []
    for name, mode, latency in rec.CASES:
        marks = [pytest.mark.slow] if mode == "compiled" else []
        out.append(pytest.param(name, mode, latency, marks=marks, id=rec.key(name, mode, latency)))
    return out


def test_every_case_is_recorded() -> None:
    assert sorted(_RECORDED) == sorted(rec.key(*c) for c in rec.CASES)


@pytest.mark.parametrize(("name", "mode", "latency"), _params())
def test_simulated_times_unchanged(name: str, mode: str, latency: bool) -> None:
    got = rec.measure(name, mode, latency)
    want = _RECORDED[rec.key(name, mode, latency)]
    assert got == want, (
        f"simulated times of {rec.key(name, mode, latency)} changed:\n"
        f"  recorded {want}\n  now      {got}\n"
        "If the cost model was meant to change, regenerate with "
        "`python tests/hardware/record_sim_times.py` and say so in the commit."
    )


def test_measurement_is_sensitive() -> None:
    """The guard can fail: one more host nanosecond per dispatch shows up in the record."""
    import dataclasses

    from torchneuron.hardware import core, settings

    base = rec.measure("cnn", "eager", False, steps=1)
    profile = settings.current_profile()
    bumped = dataclasses.replace(profile, host_dispatch_ns=profile.host_dispatch_ns + 1)
    settings.set_hardware(bumped)
    try:
        assert rec.measure("cnn", "eager", False, steps=1)["step_ns"] != base["step_ns"]
    finally:
        settings.set_hardware(profile)
        core.reset()
