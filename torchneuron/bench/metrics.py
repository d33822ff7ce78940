"""Figures derived from the measured ones: steady state, speedups, the share of the gap closed.

Why here and not in the runner: these compare runs (a mode against eager and compile of
the same model) or summarize a run's per-step times. They only combine figures the
runtime measured; nothing is estimated.

Steady state: the first step from which every step stays within ``STEADY_TOLERANCE`` of
the median of the last half of the run. Simulated times are exact, so a converged loop
repeats the same nanoseconds and the rule is sharp; a loop whose work grows (a KV cache)
is steady while the growth stays within the tolerance.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

__all__ = [
    "STEADY_TOLERANCE",
    "derive",
    "max_abs_diff",
    "steady_state",
]

STEADY_TOLERANCE = 0.05


def steady_state(step_ms: Sequence[float]) -> tuple[int | None, float | None, bool]:
    """(first steady step, median ms from it on, whether at least two steps were steady)."""
    if not step_ms:
        return None, None, False
    tail = list(step_ms[len(step_ms) // 2:])
    ref = statistics.median(tail)
    k = len(step_ms)
    while k > 0 and abs(step_ms[k - 1] - ref) <= STEADY_TOLERANCE * ref:
        k -= 1
    if k == len(step_ms):  # the last step itself is off the reference: no steady state
        return None, None, False
    steady = list(step_ms[k:])
    return k, statistics.median(steady), len(steady) >= 2


def max_abs_diff(a: Any, b: Any) -> float:
    """Largest absolute difference between two nests of tensors (lists/dicts of them)."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape:
            return float("inf")
        if a.numel() == 0:
            return 0.0
        if a.dtype == torch.bool or not (a.is_floating_point() or b.is_floating_point()):
            return float((a.to(torch.int64) != b.to(torch.int64)).any())
        return float((a.double() - b.double()).abs().max())
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return float("inf")
        return max((max_abs_diff(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return float("inf")
        return max((max_abs_diff(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    return 0.0 if a == b else float("inf")


def _ok(rec: dict[str, Any] | None) -> bool:
    return rec is not None and rec["status"] == "ok" and rec["steady_ms"] is not None


def _has_steps(rec: dict[str, Any] | None) -> bool:
    return rec is not None and rec["status"] == "ok" and bool(rec.get("step_ms"))


_MARKS = (1, 10, 100, 1000)


def cumulative(step_ms: Sequence[float]) -> list[float]:
    """Simulated ms of the run after each step (the running sum of ``step_ms``)."""
    out, total = [], 0.0
    for ms in step_ms:
        total += ms
        out.append(total)
    return out


def cumulative_marks(step_ms: Sequence[float]) -> dict[str, float]:
    """N -> cumulative ms after N steps, for the marks the run reached and its last step."""
    cum = cumulative(step_ms)
    marks = [n for n in _MARKS if n <= len(cum)] + ([len(cum)] if cum else [])
    return {str(n): round(cum[n - 1], 3) for n in dict.fromkeys(marks)}


def below_from(mine: Sequence[float], other: Sequence[float]) -> int | None:
    """First step (1-based) from which ``mine``'s cumulative time stays at or below
    ``other``'s over the steps both ran, or None if it ends above."""
    a, b = cumulative(mine), cumulative(other)
    n = min(len(a), len(b))
    if n == 0 or a[n - 1] > b[n - 1]:
        return None
    k = n
    while k > 0 and a[k - 1] <= b[k - 1]:
        k -= 1
    return k + 1


def derive(records: list[dict[str, Any]]) -> None:
    """Fill the cross-run figures of ``records`` in place: speedup over eager, share of the
    eager-to-compile gap closed, host µs per op (over eager's op count per step)."""
    by_key = {(r["model"], r["mode"]): r for r in records}
    for r in records:
        eager = by_key.get((r["model"], "eager"))
        compiled = by_key.get((r["model"], "compile"))
        if eager is not None and eager.get("ops_per_step") and r["host_wall_ms_per_step"]:
            r["host_us_per_op"] = round(r["host_wall_ms_per_step"] * 1e3 / eager["ops_per_step"],
                                        2)
        if r["mode"] == "cpu":
            continue
        if _has_steps(r):
            # the whole run's figures need step times only, not a steady state (a short
            # adaptive run may end before its steps settle)
            r["cumulative_ms"] = cumulative_marks(r["step_ms"])
            if _has_steps(eager):
                r["below_eager_from"] = below_from(r["step_ms"], eager["step_ms"])
            if _has_steps(compiled):
                r["below_compile_from"] = below_from(r["step_ms"], compiled["step_ms"])
        if not _ok(r) or not _ok(eager):
            continue
        r["speedup_vs_eager"] = round(eager["steady_ms"] / r["steady_ms"], 4)
        if _ok(compiled):
            gap = eager["steady_ms"] - compiled["steady_ms"]
            if gap > 0:
                r["gap_closed"] = round((eager["steady_ms"] - r["steady_ms"]) / gap, 4)
