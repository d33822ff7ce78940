"""One lock for every FX trace torchneuron runs, on any thread.

Why: FX marks "a trace is running" in one process-wide flag, which each trace saves on
entry and puts back on exit (``torch.fx._symbolic_trace._is_fx_tracing_flag``, and
``torch.cond``'s eager path does the same). Two threads tracing at once interleave those
saves and restores, and the flag can stay set after both are done; from then on every
``torch.compile`` call in the process fails with "Detected that you are using FX to
symbolically trace a dynamo-optimized function". Adaptive eager traces regions on its
background thread, so the traces that torchneuron starts (``prepare``, AOTAutograd in
the Dynamo backend, ``torch.cond`` run eagerly under adaptive eager) take this lock and
never overlap. A trace the user starts on their own (``make_fx``, ``torch.export``)
while a region compiles in the background is not covered.

A thread that holds the lock and must wait for the background thread (adaptive eager
publishing a compiled region from inside ``cond``'s eager path) waits with ``wait_for``,
which lets go of the lock meanwhile: the background compile needs it to finish.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

__all__ = ["TRACE_LOCK", "wait_for"]

TRACE_LOCK = threading.RLock()
"""Held for the whole of one trace; re-entrant, since a trace may start another."""

_released = threading.Condition(TRACE_LOCK)


def wait_for(future: Future) -> Any:
    """``future.result()``, letting go of ``TRACE_LOCK`` while waiting if this thread holds
    it (all its levels, taken back before returning), so that it cannot deadlock."""
    if TRACE_LOCK._is_owned():  # type: ignore[attr-defined]
        with _released:
            while not future.done():
                _released.wait(0.005)
    return future.result()
