"""One table of tunables, each with an environment override."""

from __future__ import annotations

import pytest

from torchneuron.hardware import current_profile, settings


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHNEURON_HARDWARE", "trn3")
    monkeypatch.setenv("TORCHNEURON_COMPILE_LATENCY", "0")
    settings._values.clear()
    settings._profile = None
    assert current_profile().name == "trn3"
    assert settings.compile_latency_enabled() is False


def test_defaults_and_table(monkeypatch: pytest.MonkeyPatch) -> None:
    for s in settings.TABLE:
        monkeypatch.delenv(s.env, raising=False)
    settings._values.clear()
    settings._profile = None
    assert current_profile().name == "trn2"
    assert settings.compile_latency_enabled() is True
    text = settings.describe()
    assert all(s.env in text for s in settings.TABLE)


def test_override_restores_and_unknown_names_fail() -> None:
    before = (settings.compile_latency_enabled(), current_profile())
    with settings.override(compile_latency=False, hardware="trn3"):
        assert not settings.compile_latency_enabled() and current_profile().name == "trn3"
    assert (settings.compile_latency_enabled(), current_profile()) == before
    with pytest.raises(KeyError, match="compile_latency"):
        settings.get_value("compile_latencyy")


def test_a_value_that_does_not_parse_warns_and_keeps_the_default(monkeypatch) -> None:
    """A typo in a tuning variable never stops the program: one warning naming the
    variable, the value and the default used instead."""
    from torchneuron.hardware import settings as st

    monkeypatch.setenv("TORCHNEURON_AE_HOT_THRESHOLD", "three")
    st.reset()
    try:
        with pytest.warns(UserWarning, match="TORCHNEURON_AE_HOT_THRESHOLD='three'.*default 2"):
            assert st.get_value("ae_hot_threshold") == 2
    finally:
        monkeypatch.delenv("TORCHNEURON_AE_HOT_THRESHOLD")
        st.reset()
