"""Where the cache lives and how big it may grow, from the one settings table.

The rows (``TORCHNEURON_CACHE``, ``TORCHNEURON_CACHE_DIR``, ``TORCHNEURON_CACHE_MAX_SIZE``,
``TORCHNEURON_CACHE_MEMORY_SIZE``) are declared in ``torchneuron/hardware/settings.py``;
this module only interprets them. The default directory is the user's cache directory
(``$XDG_CACHE_HOME/torchneuron``, else ``~/.cache/torchneuron``), never ``/tmp``, which
gets wiped.
"""

from __future__ import annotations

import os
from pathlib import Path

from torchneuron.hardware import settings

__all__ = ["enabled", "cache_dir", "max_size", "memory_size", "format_size", "parse_size"]

parse_size = settings.parse_size


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


def max_size() -> int:
    """Bound of the on-disk tier in bytes (``TORCHNEURON_CACHE_MAX_SIZE``)."""
    return parse_size(settings.get_value("cache_max_size"))


def memory_size() -> int:
    """Bound of the in-process tier in bytes (``TORCHNEURON_CACHE_MEMORY_SIZE``)."""
    return parse_size(settings.get_value("cache_memory_size"))


def format_size(n: float) -> str:
    """Bytes for people: ``1.2 MB`` (decimal units, as ``du -h --si`` and ccache print)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")
