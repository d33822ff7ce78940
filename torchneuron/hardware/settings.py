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
TORCHNEURON_ADAPTIVE_EAGER     0                 "1" enables adaptive eager at import
TORCHNEURON_AE_*               (see TABLE)       adaptive eager's policies (hotness, region
                                                 length, variants, exits, memory, gain)
TORCHNEURON_CACHE              1                 "0" turns the compile cache off (both tiers)
TORCHNEURON_CACHE_DIR          (user cache dir)  on-disk cache; default $XDG_CACHE_HOME/torchneuron
                                                 or ~/.cache/torchneuron (never /tmp)
TORCHNEURON_CACHE_MAX_SIZE     10GB              on-disk size bound (LRU eviction), e.g. 500MB
TORCHNEURON_CACHE_MEMORY_SIZE  256MB             in-process LRU tier bound
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
import threading
import warnings
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
    "parse_size",
    "override",
    "reset",
    "set_value",
    "set_hardware",
]


def _parse_bool(text: str) -> bool:
    return text.strip().lower() not in ("0", "false", "no", "off", "")


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
    # --- adaptive eager (torchneuron.adaptive_eager): the JIT's policies -------------------
    Setting("adaptive_eager", "TORCHNEURON_ADAPTIVE_EAGER", False, _parse_bool,
            "enable adaptive eager at import (as torchneuron.adaptive_eager.enable())"),
    Setting("ae_hot_threshold", "TORCHNEURON_AE_HOT_THRESHOLD", 2, int,
            "times a region must be seen before it is compiled"),
    Setting("ae_max_region_ops", "TORCHNEURON_AE_MAX_REGION_OPS", 4096, int,
            "longest region (ops); a sync-free stream is cut into periods at most this long"),
    Setting("ae_max_variants", "TORCHNEURON_AE_MAX_VARIANTS", 4, int,
            "compiled variants kept per start point (shapes or scalars differ)"),
    Setting("ae_exits_before_blacklist", "TORCHNEURON_AE_EXITS_BEFORE_BLACKLIST", 3, int,
            "side exits of a region, less one per good replay, that back it off (then blacklist)"),
    Setting("ae_backoff_starts", "TORCHNEURON_AE_BACKOFF_STARTS", 8, int,
            "region starts skipped after a back-off, doubled each time; blacklisted after 3"),
    Setting("ae_max_deferred_bytes", "TORCHNEURON_AE_MAX_DEFERRED_BYTES", 1 << 30, int,
            "bytes of values a replaying region may hold deferred before it ends early"),
    Setting("ae_min_gain_ns", "TORCHNEURON_AE_MIN_GAIN_NS", 50_000, int,
            "a region whose predicted host saving per replay is at most this is not compiled"),
    Setting("ae_first_tier", "TORCHNEURON_AE_FIRST_TIER", True, _parse_bool,
            "while a hot region compiles, replay it as its recorded eager kernels in one batch"),
    Setting("ae_verify_first_replay", "TORCHNEURON_AE_VERIFY_FIRST_REPLAY", True, _parse_bool,
            "each region's first replay also runs eagerly and is compared (as verify does)"),
    Setting("ae_verify_replays", "TORCHNEURON_AE_VERIFY_REPLAYS", False, _parse_bool,
            "every replay runs eagerly too and is compared; a divergent region is blacklisted"),
    # The compile cache (torchneuron/cache): read by torchneuron.cache.default_store().
    Setting("cache", "TORCHNEURON_CACHE", True, _parse_bool, "compile cache on; '0' turns it off"),
    Setting("cache_dir", "TORCHNEURON_CACHE_DIR", "", str,
            "on-disk cache directory ('' = $XDG_CACHE_HOME/torchneuron or ~/.cache/torchneuron)"),
    Setting("cache_max_size", "TORCHNEURON_CACHE_MAX_SIZE", 10 * 10**9, parse_size,
            "on-disk cache size bound in bytes (least recently used entries are evicted)"),
    Setting("cache_memory_size", "TORCHNEURON_CACHE_MEMORY_SIZE", 256 * 10**6, parse_size,
            "in-process cache tier size bound in bytes"),
)

_BY_NAME = {s.name: s for s in TABLE}
# Read by adaptive eager's background compile thread too: loads are under a lock, and
# every value, once loaded, is replaced whole (never mutated in place).
_lock = threading.Lock()
_values: dict[str, Any] = {}
_profile: HardwareProfile | None = None
# Called with the new profile after set_hardware; core.py registers one to update its cores.
_hardware_listeners: list[Callable[[HardwareProfile], None]] = []


_MISSING = object()


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
        raise KeyError(f"unknown setting {name!r}; valid: {', '.join(_BY_NAME)}")
    value = _values.get(name, _MISSING)
    if value is _MISSING:
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
