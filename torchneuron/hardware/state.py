"""One reset and one set of counters for the whole process, gathered from every layer.

Why a seam at the bottom: process state lives in each layer (cores and clocks here,
op counts in dispatch, compile counts in the compiler, the cache's store, adaptive
eager's regions), and a lower layer must never import an upper one. So each layer
registers its own ``reset`` and ``stats`` here when it is imported, under its section
name, and ``torchneuron.reset()`` / ``torchneuron.stats()`` call what is registered.

``reset_all`` runs the resets in reverse registration order: a layer registers after the
layers it imports, so the top resets first (adaptive eager stops its background compiles
before the compiler's counters and the cores are cleared). Settings are configuration,
not state: they are not reset here (``settings.reset()`` forgets them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["register", "reset_all", "gather", "sections"]

_lock = threading.Lock()
# section -> (reset, stats); insertion order is registration order (bottom layer first).
_providers: dict[str, tuple[Callable[[], None] | None, Callable[[], Any] | None]] = {}


def register(section: str, *, reset: Callable[[], None] | None = None,
             stats: Callable[[], Any] | None = None) -> None:
    """Register a layer's reset and stats under ``section`` (at the layer's import).

    Registering a section again replaces its functions (a module imported twice) and keeps
    its place in the order."""
    if reset is None and stats is None:
        raise ValueError(f"register({section!r}) needs a reset or a stats function (or both)")
    with _lock:
        _providers[section] = (reset, stats)


def sections() -> list[str]:
    """The registered sections, bottom layer first."""
    return list(_providers)


def reset_all() -> None:
    """Reset every registered layer, top first (see the module doc)."""
    with _lock:
        resets = [r for r, _ in _providers.values() if r is not None]
    for reset in reversed(resets):
        reset()


def gather() -> dict[str, Any]:
    """Each registered layer's counters in its own section, bottom layer first."""
    with _lock:
        providers = [(name, s) for name, (_, s) in _providers.items() if s is not None]
    return {name: stats() for name, stats in providers}
