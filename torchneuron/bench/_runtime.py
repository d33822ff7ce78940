"""The one place where the bench talks to adaptive eager and the compile cache.

Why one module: adaptive eager (``torchneuron.adaptive_eager``) and the persistent cache
(``TORCHNEURON_CACHE_DIR``) are built on other branches and may still change shape; every
call the bench makes into them is here, so an adjustment is one place. Nothing here
fakes a missing feature: when ``import torchneuron.adaptive_eager`` fails, the adaptive
modes are reported as not run with the import's own error.

Contract relied on (issue 8 / issue 9):
- ``torchneuron.adaptive_eager``: ``enable()``, ``disable()``, ``enabled()`` (a context
  manager), ``stats() -> dict`` with ``ops_recorded``, ``regions_detected``,
  ``compilations``, ``cache_hits``, ``replays``, ``side_exits``, ``fallback_reasons``
  (reason -> count), ``explain() -> str``, ``reset()``.
- the cache: ``TORCHNEURON_CACHE_DIR`` (directory), ``TORCHNEURON_CACHE=0`` (off), read
  from the environment or the settings table; ``torchneuron.compiler.stats()`` counts
  cache hits under a key containing ``cache_hit``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

__all__ = [
    "adaptive_module",
    "adaptive_scope",
    "adaptive_summary",
    "background_compile_ns",
    "cache_hits",
    "use_cache_dir",
]

ADAPTIVE = "torchneuron.adaptive_eager"
_CACHE_ENV = ("TORCHNEURON_CACHE_DIR", "TORCHNEURON_CACHE")


def adaptive_module() -> ModuleType:
    """``torchneuron.adaptive_eager``; raises the import's own error when it is missing."""
    return importlib.import_module(ADAPTIVE)


@contextlib.contextmanager
def adaptive_scope() -> Iterator[None]:
    """Adaptive eager on for the block (``with adaptive_eager.enabled():``)."""
    ae = adaptive_module()
    ae.reset()
    with ae.enabled():
        yield


def adaptive_summary() -> tuple[dict[str, Any] | None, str | None]:
    """(stats, explain) of adaptive eager, or (None, None) when it is not importable."""
    try:
        ae = adaptive_module()
    except ImportError:
        return None, None
    return dict(ae.stats()), str(ae.explain())


def use_cache_dir(path: str | None) -> None:
    """Point the compile cache at ``path`` (``None``: cache off) for this process.

    Set before anything reads the settings: the environment for whichever layer reads it,
    and the settings table's entries with those environment names, when they exist.
    """
    values = {"TORCHNEURON_CACHE_DIR": path or "", "TORCHNEURON_CACHE": "1" if path else "0"}
    for env, value in values.items():
        if env == "TORCHNEURON_CACHE_DIR" and not path:
            os.environ.pop(env, None)
        else:
            os.environ[env] = value
    from torchneuron.hardware import settings

    for s in settings.TABLE:
        if s.env in _CACHE_ENV and (s.env != "TORCHNEURON_CACHE_DIR" or path):
            settings.set_value(s.name, s.parse(values[s.env]))


def _hit_counts(stats: dict[str, Any] | None) -> list[int]:
    if not stats:
        return []
    return [int(v) for k, v in stats.items() if "cache_hit" in k and isinstance(v, int)]


def cache_hits(compiler_stats: dict[str, Any], adaptive_stats: dict[str, Any] | None
               ) -> int | None:
    """Cache hits the runtime reports (compiler and adaptive eager); None if neither does."""
    counts = _hit_counts(compiler_stats) + _hit_counts(adaptive_stats)
    return sum(counts) if counts else None


def background_compile_ns(adaptive_stats: dict[str, Any] | None) -> int | None:
    """Modeled compile latency spent off the critical path (adaptive eager's simulated
    compiler queue), as adaptive eager reports it; None when it reports none."""
    if not adaptive_stats:
        return None
    for key in ("background_compile_ns", "compile_ns_background", "compiler_queue_ns"):
        value = adaptive_stats.get(key)
        if isinstance(value, int):
            return value
    return None
