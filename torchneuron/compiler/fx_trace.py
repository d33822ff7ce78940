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
"""

from __future__ import annotations

import threading

__all__ = ["TRACE_LOCK"]

TRACE_LOCK = threading.RLock()
"""Held for the whole of one trace; re-entrant, since a trace may start another."""
