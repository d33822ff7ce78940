"""Every tunable of torchneuron, in one table, each with an environment override.

Why one table: a benchmark number is only reproducible if every knob that shaped it can be
listed. ``TABLE`` is that list; ``describe()`` prints it with the values in force.

Why here, at the bottom: the mechanism (the table, parsing, one warning on a value that
does not parse, ``get_value``/``set_value``/``override``) is shared by every layer, so it
lives in the layer everyone may import. The rows do not: each package declares its own
with ``declare(...)`` in the module that owns them, imported by that package's
``__init__`` (so a row is declared before anything reads it, and this module never names
an upper layer). Rows declared elsewhere:

- ``torchneuron/compiler/options.py``: ``TORCHNEURON_VERIFY``, ``TORCHNEURON_DUMP_DIR``,
  ``TORCHNEURON_COMPILE_IN_PROCESS``, ``TORCHNEURON_COMPILE_TIMEOUT``;
- ``torchneuron/adaptive_eager/options.py``: ``TORCHNEURON_ADAPTIVE_EAGER`` and the
  ``TORCHNEURON_AE_*`` policies;
- ``torchneuron/cache/config.py``: ``TORCHNEURON_CACHE``, ``TORCHNEURON_CACHE_DIR``,
  ``TORCHNEURON_CACHE_MAX_SIZE``, ``TORCHNEURON_CACHE_MEMORY_SIZE``,
  ``TORCHNEURON_CACHE_RETRY_FAILED``.

Read the table as ``settings.TABLE`` (it grows as packages declare their rows), never
``from settings import TABLE``.

=============================  ================  ==============================================
environment variable           default           meaning
=============================  ================  ==============================================
TORCHNEURON_HARDWARE           trn2              hardware profile simulated (see profiles.py)
TORCHNEURON_COMPILE_LATENCY    1                 "0" zeroes all modeled compile latency
                                                 (eager NEFF compiles and program compiles)
TORCHNEURON_TIMELINE_TRACE     0                 keep the last N device entries per timeline
=============================  ================  ==============================================

A row is read from the environment once, at first use (``reset()`` forgets it), unless it
is declared ``live``: a live row is read from the environment at every use (the compiler's
debugging switches, which users and tests set while the process runs). ``set_value`` and
``override`` win over the environment either way.

``set_hardware`` swaps the profile of every existing core (see ``core.py``): memory capacity
follows the new profile, the set of compiled eager signatures is cleared (a NEFF is built for
one target), and timelines and counters are kept.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .profiles import HardwareProfile, get_profile

__all__ = [
    "TABLE",
    "Setting",
    "compile_latency_enabled",
    "current_profile",
    "declare",
    "describe",
    "get_value",
    "parse_bool",
    "parse_size",
    "override",
    "reset",
    "set_value",
    "set_hardware",
]


def parse_bool(text: str) -> bool:
    """``"0"``, ``"false"``, ``"no"``, ``"off"`` and ``""`` are false; anything else true."""
    return text.strip().lower() not in ("0", "false", "no", "off", "")


_parse_bool = parse_bool


_SIZE_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6, "G": 10**9,
               "GB": 10**9, "T": 10**12, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
               "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str | int) -> int:
    """``"2GB"`` -> 2_000_000_000, ``"512MiB"``, ``"1.5G"``, or a plain number of bytes."""
    if isinstance(text, int):
        return text
    raw = text.strip().upper().replace(" ", "")
    num = raw.rstrip("KMGTIB")
    unit = raw[len(num):]
    if unit not in _SIZE_UNITS or not num:
        raise ValueError(f"cannot read size {text!r}; expected e.g. 500MB, 2GB, 1GiB or bytes")
    return int(float(num) * _SIZE_UNITS[unit])


@dataclass(frozen=True)
class Setting:
    """One tunable: its name, environment variable, default, parser and one-line meaning."""

    name: str
    env: str
    default: Any
    parse: Callable[[str], Any]
    doc: str
    live: bool = False  # read the environment at every use, not once


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
        "timeline_trace",
        "TORCHNEURON_TIMELINE_TRACE",
        0,
        int,
        "keep the last N device entries (label, start, end) per timeline",
    ),
)

_BY_NAME = {s.name: s for s in TABLE}
_BY_ENV = {s.env: s for s in TABLE}
# Read by adaptive eager's background compile thread too: loads are under a lock, and
# every value, once loaded, is replaced whole (never mutated in place).
_lock = threading.Lock()
_values: dict[str, Any] = {}
_profile: HardwareProfile | None = None
# Called with the new profile after set_hardware; core.py registers one to update its cores.
_hardware_listeners: list[Callable[[HardwareProfile], None]] = []


_MISSING = object()


def _identity(row: Setting) -> tuple:
    """What makes two declarations the same row (a reloaded module's parser is a new
    function object with the same name)."""
    return (row.name, row.env, row.default, getattr(row.parse, "__qualname__", row.parse),
            row.doc, row.live)


def declare(*rows: Setting) -> None:
    """Add a package's rows to the table (at its import, before anything reads them).

    Declaring the same row again (a module imported twice, e.g. reloaded) is a no-op; a
    different row under a name or an environment variable already declared raises, so
    two packages can never disagree about one knob."""
    global TABLE
    with _lock:
        new = []
        for row in rows:
            known = _BY_NAME.get(row.name) or _BY_ENV.get(row.env)
            if known is not None:
                if _identity(known) != _identity(row):
                    raise ValueError(
                        f"setting {row.name!r} ({row.env}) is already declared as {known!r}; "
                        f"a knob is declared once, by the package that owns it. Rename the "
                        f"new row or change the existing one.")
                continue
            new.append(row)
        for row in new:
            _BY_NAME[row.name] = row
            _BY_ENV[row.env] = row
        TABLE = TABLE + tuple(new)


def _show_size(n: int) -> str:
    """``10_000_000_000`` -> ``10GB``: a size as the variable would spell it."""
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def _load(setting: Setting) -> Any:
    """The environment's value, or the default with one warning when it does not parse:
    a typo in a tuning variable must not stop the user's program."""
    raw = os.environ.get(setting.env)
    if raw is None:
        return setting.default
    try:
        return setting.parse(raw)
    except (ValueError, TypeError) as err:
        kind = getattr(setting.parse, "__name__", "value").lstrip("_").replace("parse_", "")
        default = _show_size(setting.default) if setting.parse is parse_size \
            else repr(setting.default)
        warnings.warn(f"{setting.env}={raw!r} is not a valid {kind} ({err}); using the "
                      f"default {default}. Expected: {setting.doc}.", stacklevel=3)
        return setting.default


def get_value(name: str) -> Any:
    """Current value of a setting (environment at first use, unless ``set``)."""
    if name not in _BY_NAME:
        raise KeyError(f"unknown setting {name!r}; valid: {', '.join(_BY_NAME)}. Rows of "
                       f"the compiler, the cache and adaptive eager are declared when "
                       f"``import torchneuron`` imports those packages")
    value = _values.get(name, _MISSING)
    if value is _MISSING:
        row = _BY_NAME[name]
        if row.live:
            return _load(row)
        with _lock:
            value = _values.setdefault(name, _load(_BY_NAME[name]))
    return value


def reset() -> None:
    """Forget every value set in this process: the environment is read again on next use.

    For tests and benchmarks. The hardware profile is re-read too (existing cores keep
    theirs until ``set_hardware``)."""
    global _profile
    with _lock:
        _values.clear()
        _profile = None


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
    # Live rows not set in this process go back to following the environment.
    unset = {k for k in values if _BY_NAME[k].live and k not in _values}
    saved_profile = _profile
    try:
        for k, v in values.items():
            set_value(k, v)
        yield
    finally:
        for k, v in saved.items():
            if k == "hardware":
                set_hardware(saved_profile if saved_profile is not None else v)
            elif k in unset:
                _values.pop(k, None)
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
