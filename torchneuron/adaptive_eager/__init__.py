"""Adaptive eager: record the eager op stream, find regions that repeat, compile them in
the background, and swap in their executables, falling back to eager on any divergence.

``enable()`` installs the dispatch mode (``disable()`` removes it; ``enabled()`` is a
context manager); ``stats()`` and ``explain()`` say what was found, compiled, replayed
and why anything ran eagerly; ``reset()`` forgets everything (tests, benchmarks).
``TORCHNEURON_ADAPTIVE_EAGER=1`` enables it at ``import torchneuron``; ``python -m
torchneuron.run script.py`` enables it and prints the summary at exit.

The runtime is split by job, in the order an op meets it: ``mode`` (the dispatch mode
and the op path), ``detect`` (segments into region sightings), ``lifecycle`` (the one
driver of a region's state: capture, compile, publish), ``swapin`` (which region
replays, variants, how replays end), all sharing one ``ledger``; ``replay`` defers and
runs a region's ops. None of them imports another in a circle.

Imports ``compiler``, ``dispatch``, ``device`` and ``hardware`` (all below it).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from torchneuron.adaptive_eager import background, hops, hostdata
from torchneuron.adaptive_eager import options as _options  # noqa: F401  (declares its settings)
from torchneuron.adaptive_eager.explain import explain_runtime
from torchneuron.adaptive_eager.mode import AdaptiveEagerMode, Runtime
from torchneuron.adaptive_eager.reasons import Reason
from torchneuron.adaptive_eager.region import Region, State
from torchneuron.device import plain_paths
from torchneuron.hardware import core as _core
from torchneuron.hardware import state as _state

__all__ = ["Reason", "Region", "State", "enable", "disable", "enabled", "is_enabled",
           "stats", "explain", "reset", "regions"]

log = logging.getLogger("torchneuron.adaptive_eager")
_runtime = Runtime()
_mode: AdaptiveEagerMode | None = None


def _on_sync(index: int, kind: str) -> None:
    _runtime.on_sync(index, kind)


def _at_exit() -> None:
    """A process that ends with adaptive eager still on: its regions whose real compile
    was not started yet are compiled for the compile cache, as ``disable()`` does. Run
    among ``threading``'s exit hooks, which run before the compile thread is joined (a
    plain ``atexit`` hook would run after, when no work can be handed to it)."""
    if _mode is not None:
        _runtime.lifecycle.start_unstarted()


threading._register_atexit(_at_exit)  # type: ignore[attr-defined]


def enable() -> None:
    """Start adaptive eager for every neuron op from now on (idempotent)."""
    global _mode
    if _mode is not None:
        return
    hops.install(AdaptiveEagerMode, _runtime)
    plain_paths.hold_for_cpu_tensors()  # the mode must not change a CPU tensor's bits
    _mode = AdaptiveEagerMode(_runtime)
    _mode.__enter__()
    hostdata.install()
    _core.add_sync_listener(_on_sync)
    log.info("adaptive eager enabled")


def disable() -> None:
    """Stop adaptive eager: any replay in progress ends here; regions are kept."""
    global _mode
    if _mode is None:
        return
    _runtime.flush()
    _runtime.lifecycle.start_unstarted()  # for the compile cache (``Lifecycle``)
    _core.remove_sync_listener(_on_sync)
    hostdata.uninstall()
    hops.uninstall()
    mode, _mode = _mode, None
    mode.__exit__(None, None, None)
    plain_paths.release_for_cpu_tensors()
    background.drain()  # no background trace outlives the mode (see background.drain)
    log.info("adaptive eager disabled")


def is_enabled() -> bool:
    return _mode is not None


@contextlib.contextmanager
def enabled() -> Iterator[None]:
    """``with torchneuron.adaptive_eager.enabled(): ...`` runs the body adaptively."""
    was = is_enabled()
    enable()
    try:
        yield
    finally:
        if not was:
            disable()


def reset() -> None:
    """Forget all regions, executables and counters (for tests and benchmarks)."""
    global _runtime
    was = is_enabled()
    disable()
    background.shutdown()
    _runtime = Runtime()
    if was:
        enable()


def regions() -> list[Region]:
    """The regions found so far, in the order they were detected."""
    return list(_runtime.regions.values())


def stats() -> dict[str, Any]:
    """Counters: ops recorded and deferred, regions, compilations, replays, side exits,
    variant switches (``SwapIn.switch_variant``), fallback reasons (reason -> count), regions by state, the wall-clock stall."""
    c = _runtime.counts
    by_state: dict[str, int] = {}
    for r in _runtime.regions.values():
        by_state[r.state.value] = by_state.get(r.state.value, 0) + 1
    return {
        "enabled": is_enabled(),
        "ops_recorded": c["ops_recorded"],
        "ops_deferred": c["ops_deferred"],
        # ops whose shapes change every step (a growing KV cache), run eagerly between regions
        # and ops the compiler refused in a region (``refused``), run there too
        "ops_between_regions": c["ops_between_regions"],
        "refused_ops": _runtime.refused.describe(),
        "regions_detected": c["regions_detected"],
        "compilations": c["compilations"],
        "compile_failures": c["compile_failures"],
        "cache_hits": c["cache_hits"],
        "replays": c["replays"],
        "first_tier_replays": c["first_tier_replays"],
        "side_exits": c["side_exits"],
        # a replay that went on as another variant from its start instead of exiting
        "variant_switches": c["variant_switches"],
        "fallback_reasons": dict(sorted(_runtime.reasons.items())),
        "regions_by_state": dict(sorted(by_state.items())),
        "compile_wall_stall_s": round(_runtime.wall_stall_s, 6),
    }


def explain() -> str:
    """Readable text: each region (length, times seen, state, executable, replays, exits
    with reasons, why it is not swapped in); regions too short to pay summarized in one
    line (``explain.py`` says what else it takes care to say)."""
    from torchneuron.hardware import get_core
    from torchneuron.hardware.settings import get_value

    return explain_runtime(_runtime, stats(), enabled=is_enabled(),
                           now_ns=get_core(_runtime.index).now,
                           min_gain_ns=get_value("ae_min_gain_ns"))


# Adaptive eager's section of torchneuron.reset() / torchneuron.stats().
_state.register("adaptive_eager", reset=reset, stats=stats)
