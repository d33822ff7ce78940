"""Every tunable of the simulated hardware, in one table, each with an environment override.

Why one table: a benchmark number is only reproducible if every knob that shaped it can be
listed. ``TABLE`` is that list; ``describe()`` prints it with the values in force.

=============================  ================  ==============================================
environment variable           default           meaning
=============================  ================  ==============================================
TORCHNEURON_HARDWARE           trn2              hardware profile simulated (see profiles.py)
TORCHNEURON_COMPILE_LATENCY    1                 "0" zeroes all modeled compile latency
                                                 (eager NEFF compiles and program compiles)
TORCHNEURON_TIMELINE_TRACE     0                 keep the last N device entries per timeline
TORCHNEURON_VERIFY             0                 "1" checks each new compiled graph's first
                                                 run against eager (compiler/verify.py)
=============================  ================  ==============================================

``set_hardware`` swaps the profile of every existing core (see ``core.py``): memory capacity
follows the new profile, the set of compiled eager signatures is cleared (a NEFF is built for
one target), and timelines and counters are kept.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .profiles import HardwareProfile, get_profile

__all__ = [
    "TABLE",
    "compile_latency_enabled",
    "current_profile",
    "describe",
    "get_value",
    "override",
    "set_value",
    "set_hardware",
]


def _parse_bool(text: str) -> bool:
    return text.strip().lower() not in ("0", "false", "no", "off", "")


@dataclass(frozen=True)
class Setting:
    """One tunable: its name, environment variable, default, parser and one-line meaning."""

    name: str
    env: str
    default: Any
    parse: Callable[[str], Any]
    doc: str


TABLE: tuple[Setting, ...] = (
    Setting("hardware", "TORCHNEURON_HARDWARE", "trn2", str, "hardware profile simulated"),
    Setting(
        "compile_latency",
        "TORCHNEURON_COMPILE_LATENCY",
        True,
        _parse_bool,
        "model compile latency (eager NEFF and program compiles); '0' zeroes it",
    ),
    Setting(
        "verify",
        "TORCHNEURON_VERIFY",
        False,
        _parse_bool,
        "run each newly compiled graph once eagerly too and refuse it if outputs differ",
    ),
    Setting(
        "timeline_trace",
        "TORCHNEURON_TIMELINE_TRACE",
        0,
        int,
        "keep the last N device entries (label, start, end) per timeline",
    ),
)

_BY_NAME = {s.name: s for s in TABLE}
_values: dict[str, Any] = {}
_profile: HardwareProfile | None = None
# Called with the new profile after set_hardware; core.py registers one to update its cores.
_hardware_listeners: list[Callable[[HardwareProfile], None]] = []


def _load(setting: Setting) -> Any:
    raw = os.environ.get(setting.env)
    return setting.default if raw is None else setting.parse(raw)


def get_value(name: str) -> Any:
    """Current value of a setting (environment at first use, unless ``set``)."""
    if name not in _BY_NAME:
        raise KeyError(f"unknown setting {name!r}; valid: {', '.join(_BY_NAME)}")
    if name not in _values:
        _values[name] = _load(_BY_NAME[name])
    return _values[name]


def set_value(name: str, value: Any) -> None:
    """Set a setting for this process. ``hardware`` goes through ``set_hardware``."""
    if name == "hardware":
        set_hardware(value)
        return
    get_value(name)  # validates the name
    _values[name] = value


@contextlib.contextmanager
def override(**values: Any) -> Iterator[None]:
    """Temporarily set settings, e.g. ``with override(compile_latency=False): ...``."""
    saved = {k: get_value(k) for k in values}
    saved_profile = _profile
    try:
        for k, v in values.items():
            set_value(k, v)
        yield
    finally:
        for k, v in saved.items():
            if k == "hardware":
                set_hardware(saved_profile if saved_profile is not None else v)
            else:
                _values[k] = v


def compile_latency_enabled() -> bool:
    """Whether modeled compile latency is charged (``TORCHNEURON_COMPILE_LATENCY``)."""
    return bool(get_value("compile_latency"))


def current_profile() -> HardwareProfile:
    """The profile simulated now (``TORCHNEURON_HARDWARE`` until ``set_hardware``)."""
    global _profile
    if _profile is None:
        _profile = get_profile(str(get_value("hardware")))
    return _profile


def set_hardware(name_or_profile: str | HardwareProfile) -> HardwareProfile:
    """Simulate another profile from now on; existing cores switch to it (see module doc)."""
    global _profile
    if isinstance(name_or_profile, HardwareProfile):
        profile = name_or_profile
    else:
        profile = get_profile(name_or_profile)
    _profile = profile
    _values["hardware"] = profile.name
    for listener in list(_hardware_listeners):
        listener(profile)
    return profile


def on_hardware_change(listener: Callable[[HardwareProfile], None]) -> None:
    """Register a callback run after every ``set_hardware`` (used by core.py)."""
    _hardware_listeners.append(listener)


def describe() -> str:
    """The table with the values in force, one setting per line, for reports."""
    lines = []
    for s in TABLE:
        lines.append(f"{s.env}={get_value(s.name)!r}  # {s.doc} (default {s.default!r})")
    return "\n".join(lines)
