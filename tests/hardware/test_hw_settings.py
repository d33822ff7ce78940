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


def test_each_package_declares_its_own_rows_once() -> None:
    """The bottom layer's table holds every package's rows after ``import torchneuron``;
    the same row declared again is a no-op, a different row under a taken name raises."""
    names = {s.name for s in settings.TABLE}
    assert {"hardware", "verify", "dump_dir", "ae_hot_threshold", "cache_dir"} <= names
    row = next(s for s in settings.TABLE if s.name == "ae_hot_threshold")
    settings.declare(row)
    assert [s.name for s in settings.TABLE].count("ae_hot_threshold") == 1
    with pytest.raises(ValueError, match="already declared"):
        settings.declare(settings.Setting("ae_hot_threshold", row.env, 3, int, "twice"))
    with pytest.raises(ValueError, match="already declared"):
        settings.declare(settings.Setting("other_name", row.env, 2, int, "same variable"))


def test_live_rows_follow_the_environment_until_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiler's debugging switches are read at every use, as before they joined the
    table; ``override`` wins and then hands the row back to the environment."""
    from torchneuron.compiler import dump
    from torchneuron.compiler.lower import worker

    monkeypatch.delenv("TORCHNEURON_DUMP_DIR", raising=False)
    monkeypatch.delenv("TORCHNEURON_COMPILE_IN_PROCESS", raising=False)
    monkeypatch.delenv("TORCHNEURON_COMPILE_TIMEOUT", raising=False)
    assert dump.dump_dir() is None and worker.in_process_default() is False
    assert worker.default_timeout() == 300.0
    monkeypatch.setenv("TORCHNEURON_DUMP_DIR", "/some/where")
    monkeypatch.setenv("TORCHNEURON_COMPILE_IN_PROCESS", "false")  # set unless "" or "0"
    monkeypatch.setenv("TORCHNEURON_COMPILE_TIMEOUT", "12.5")
    assert str(dump.dump_dir()) == "/some/where" and worker.in_process_default() is True
    assert worker.default_timeout() == 12.5
    with settings.override(compile_timeout=1.0):
        assert worker.default_timeout() == 1.0
    monkeypatch.setenv("TORCHNEURON_COMPILE_TIMEOUT", "7")
    assert worker.default_timeout() == 7.0


def test_no_layer_reads_a_row_of_a_layer_above_it() -> None:
    """A row is declared by the package that owns it, imported after the layers below it:
    a lower layer naming an upper layer's row would read it before it is declared (and
    depend on that layer). Checked on the source: no lower package mentions the row."""
    from pathlib import Path

    from torchneuron.adaptive_eager import options as ae_options
    from torchneuron.cache import config as cache_config
    from torchneuron.compiler import options as compiler_options

    pkg = Path(settings.__file__).resolve().parents[1]
    below = {"hardware": [], "device": ["hardware"], "dispatch": ["hardware", "device"]}
    below["compiler"] = [*below["dispatch"], "dispatch"]
    below["cache"] = below["compiler"]
    below["adaptive_eager"] = [*below["compiler"], "compiler", "cache", "dynamo"]
    owners = {"compiler": compiler_options.ROWS, "cache": cache_config.ROWS,
              "adaptive_eager": ae_options.ROWS}
    for owner, rows in owners.items():
        for folder in below[owner]:
            for path in (pkg / folder).rglob("*.py"):
                text = path.read_text()
                for row in rows:
                    assert f'"{row.name}"' not in text and f"'{row.name}'" not in text, (
                        f"{path.relative_to(pkg)} names {owner}'s setting {row.name!r}")
