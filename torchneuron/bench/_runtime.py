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
- the cache: the settings ``cache_dir`` and ``cache`` (``TORCHNEURON_CACHE_DIR``,
  ``TORCHNEURON_CACHE``; rows declared by ``torchneuron/cache/config.py``), set here
  through the settings API; ``torchneuron.compiler.stats()["cache"]["hits"]`` counts
  executables a store served.
- the simulated compiler queue: ``Timeline.compiler_busy_ns`` (background compile latency).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from torchneuron.hardware import settings

__all__ = [
    "adaptive_module",
    "adaptive_scope",
    "adaptive_summary",
    "background_compile_ns",
    "cache_hits",
    "last_tier_in",
    "use_cache_dir",
]

def adaptive_module() -> ModuleType:
    """``torchneuron.adaptive_eager``; raises the import's own error when it is missing."""
    from torchneuron import adaptive_eager

    return adaptive_eager


@contextlib.contextmanager
def adaptive_scope() -> Iterator[None]:
    """Adaptive eager on for the block (``with adaptive_eager.enabled():``)."""
    ae = adaptive_module()
    ae.reset()
    with ae.enabled():
        yield


def adaptive_summary(explain: bool = True) -> tuple[dict[str, Any] | None, str | None]:
    """(stats, explain) of adaptive eager, or (None, None) when it is not importable;
    ``explain=False`` leaves the text out (None), for a check after every step."""
    try:
        ae = adaptive_module()
    except ImportError:
        return None, None
    return dict(ae.stats()), (str(ae.explain()) if explain else None)


def last_tier_in(stats: dict[str, Any] | None) -> bool:
    """Whether adaptive eager's last tier is in (what ``--steps auto`` waits for): compiled
    programs of its regions have replayed (replays beyond ``first_tier_replays``) and no
    region is still being captured or compiled (``regions_by_state`` has no ``hot`` and
    no ``compiling``). Regions refused or blacklisted run eagerly for good; regions not
    yet hot may never be, so neither is waited for."""
    if not stats:
        return False
    by_state = stats.get("regions_by_state") or {}
    second = int(stats.get("replays") or 0) - int(stats.get("first_tier_replays") or 0)
    return second > 0 and not by_state.get("compiling") and not by_state.get("hot")


def use_cache_dir(path: str | None) -> None:
    """Point the compile cache at ``path`` (``None``: cache off) for this process.

    Through the settings API (``set_value``), before anything reads them; with ``None``
    the directory setting is left as it is and the cache is turned off."""
    import torchneuron.cache  # noqa: F401  (declares the cache's settings rows)

    if path:
        settings.set_value("cache_dir", path)
    settings.set_value("cache", bool(path))


def cache_hits(compiler_stats: dict[str, Any], adaptive_stats: dict[str, Any] | None
               ) -> int | None:
    """Executables a cache served, as the runtime reports them; None if it reports none.

    Every path that compiles (torch.compile graphs, adaptive eager's background compiles,
    which run ``compile_graph`` in this process) is counted by ``compiler.stats()``;
    adaptive eager's own count is the fallback when the compiler has no cache counters."""
    cache = compiler_stats.get("cache")
    if isinstance(cache, dict) and isinstance(cache.get("hits"), int):
        return int(cache["hits"])
    if adaptive_stats and isinstance(adaptive_stats.get("cache_hits"), int):
        return int(adaptive_stats["cache_hits"])
    return None


def background_compile_ns(core: Any) -> int | None:
    """Modeled compile latency queued on the core's simulated background compiler queue
    (adaptive eager's region compiles, off the critical path); None if there is no queue."""
    value = getattr(core.timeline, "compiler_busy_ns", None)
    return int(value) if isinstance(value, int) else None
