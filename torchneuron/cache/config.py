"""Where the cache lives and how big it may grow: the cache's rows of the one settings table.

The rows (``TORCHNEURON_CACHE``, ``TORCHNEURON_CACHE_DIR``, ``TORCHNEURON_CACHE_MAX_SIZE``,
``TORCHNEURON_CACHE_MEMORY_SIZE``, ``TORCHNEURON_CACHE_RETRY_FAILED``) are declared here, by the package that reads them, in
the table of ``torchneuron/hardware/settings.py`` (which owns the parsing and warnings);
this module also interprets them. The default directory is the user's cache directory
(``$XDG_CACHE_HOME/torchneuron``, else ``~/.cache/torchneuron``), never ``/tmp``, which
gets wiped.

A bad value (``TORCHNEURON_CACHE_MAX_SIZE=garbage``, a negative size) never stops the
program: it is refused at the setting with one warning naming the variable, the
accepted form and the default used instead.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path
from typing import Any

from torchneuron.hardware import settings

__all__ = ["ROWS", "enabled", "cache_dir", "max_size", "memory_size", "retry_failed",
           "format_size", "parse_size"]

parse_size = settings.parse_size

ROWS: tuple[settings.Setting, ...] = (
    settings.Setting("cache", "TORCHNEURON_CACHE", True, settings.parse_bool,
                     "compile cache on; '0' turns it off"),
    settings.Setting("cache_dir", "TORCHNEURON_CACHE_DIR", "", str,
                     "on-disk cache directory ('' = $XDG_CACHE_HOME/torchneuron or "
                     "~/.cache/torchneuron)"),
    settings.Setting("cache_max_size", "TORCHNEURON_CACHE_MAX_SIZE", 10 * 10**9, parse_size,
                     "on-disk cache size bound in bytes (least recently used entries are "
                     "evicted)"),
    settings.Setting("cache_memory_size", "TORCHNEURON_CACHE_MEMORY_SIZE", 256 * 10**6,
                     parse_size, "in-process cache tier size bound in bytes"),
    settings.Setting("cache_retry_failed", "TORCHNEURON_CACHE_RETRY_FAILED", False,
                     settings.parse_bool, "compile again a graph whose compile failed before "
                     "(by default the failure is remembered and the graph runs eagerly)"),
)
settings.declare(*ROWS)


def enabled() -> bool:
    """Whether compilation goes through the cache at all (``TORCHNEURON_CACHE``)."""
    return bool(settings.get_value("cache"))


def cache_dir() -> Path:
    """The on-disk cache directory (``TORCHNEURON_CACHE_DIR`` or the user cache dir)."""
    configured = str(settings.get_value("cache_dir") or "")
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "torchneuron"


def retry_failed() -> bool:
    """Whether a remembered failed compile is tried again (``TORCHNEURON_CACHE_RETRY_FAILED``)."""
    return bool(settings.get_value("cache_retry_failed"))


def max_size() -> int:
    """Bound of the on-disk tier in bytes (``TORCHNEURON_CACHE_MAX_SIZE``)."""
    return _size_setting("cache_max_size")


def memory_size() -> int:
    """Bound of the in-process tier in bytes (``TORCHNEURON_CACHE_MEMORY_SIZE``)."""
    return _size_setting("cache_memory_size")


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _size_setting(name: str) -> int:
    """A size setting, or its default (and one warning) when its value is unusable."""
    row = next(s for s in settings.TABLE if s.name == name)
    try:
        value: Any = parse_size(settings.get_value(name))
        if value >= 0:
            return int(value)
        why = "it is negative"
    except (ValueError, TypeError, OverflowError):
        why = "not a size"
    raw = os.environ.get(row.env, "")
    with _warned_lock:
        first = (row.env, raw) not in _warned
        _warned.add((row.env, raw))
    if first:
        warnings.warn(f"torchneuron cache: ignoring {row.env}={raw!r} ({why}); expected a "
                      f"size >= 0 such as 500MB, 2GB or 1GiB. Using the default, "
                      f"{format_size(row.default).replace(' ', '').replace('.0', '')}.",
                      stacklevel=3)
    return int(row.default)


def format_size(n: float) -> str:
    """Bytes for people: ``1.2 MB`` (decimal units, as ``du -h --si`` and ccache print)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")
