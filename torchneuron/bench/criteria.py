"""Whether an adaptive-eager run meets the full report's criteria (issue 20), from the records.

Why a module of its own: the criteria are a claim the report makes about a whole run, and
a reader should not have to check thousands of per-step figures by hand to believe it.
They are computed here from the same measured per-step simulated times (``step_ms``) the
cumulative table and chart show; nothing is projected.

The criteria (issue 20's acceptance for the full report), per adaptive run of a model:

- its cumulative simulated time is at most eager's after every step from step
  ``EAGER_FROM_STEP`` on (steps counted from 1: "after step 5" is the sum of 5 steps);
- it is at most torch.compile's after every step of the run;
- its last tier (the compiled programs) came in within the run (``--steps auto``'s
  ``last_tier_step``; ``None`` when the run was not paced by ``--steps auto``).

A comparison needs both runs to have run the same steps; when they did not (a timeout, a
crash), the check is ``None`` and ``why`` says so rather than judging a shorter run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchneuron.bench.metrics import cumulative

__all__ = ["EAGER_FROM_STEP", "fill", "most_above", "whole_run_checks"]

EAGER_FROM_STEP = 5


def most_above(mine: Sequence[float], other: Sequence[float], from_step: int = 1
               ) -> tuple[int, float] | None:
    """(step, ms) where ``mine``'s cumulative time is furthest above ``other``'s, over the
    steps from ``from_step`` (1-based) both ran; None when it is never above there."""
    a, b = cumulative(mine), cumulative(other)
    worst: tuple[int, float] | None = None
    for i in range(max(0, from_step - 1), min(len(a), len(b))):
        d = a[i] - b[i]
        if d > 0 and (worst is None or d > worst[1]):
            worst = (i + 1, round(d, 6))
    return worst


def _against(mine: dict[str, Any], other: dict[str, Any] | None, name: str, from_step: int
             ) -> tuple[bool | None, list[Any] | None, str | None]:
    """(criterion met, [step, ms] furthest above, why it could not be judged)."""
    if other is None or other.get("status") != "ok" or not other.get("step_ms"):
        return None, None, f"no {name} run with step times"
    if len(other["step_ms"]) != len(mine["step_ms"]):
        return None, None, (f"{name} ran {len(other['step_ms'])} steps, this run "
                            f"{len(mine['step_ms'])}")
    worst = most_above(mine["step_ms"], other["step_ms"], from_step)
    return worst is None, (list(worst) if worst else None), None


def whole_run_checks(mine: dict[str, Any], eager: dict[str, Any] | None,
                     compiled: dict[str, Any] | None) -> dict[str, Any] | None:
    """The criteria for the run ``mine`` (see the module docstring), or None when it has
    no step times. ``met`` is True only when every criterion could be judged and holds."""
    if mine.get("status") != "ok" or not mine.get("step_ms"):
        return None
    vs_eager, above_eager, why_e = _against(mine, eager, "eager", EAGER_FROM_STEP)
    vs_compile, above_compile, why_c = _against(mine, compiled, "compile", 1)
    paced = mine.get("steps_cap") is not None
    last_tier = (mine.get("last_tier_step") is not None) if paced else None
    why = [w for w in (why_e, why_c) if w]
    if not paced:
        why.append("not a --steps auto run: whether the last tier came in is not known")
    return {
        "steps": len(mine["step_ms"]),
        "at_or_below_eager_from_step": EAGER_FROM_STEP,
        "at_or_below_eager": vs_eager,
        "at_or_below_compile_every_step": vs_compile,
        "last_tier_in": last_tier,
        "most_above_eager": above_eager,
        "most_above_compile": above_compile,
        "met": vs_eager is True and vs_compile is True and last_tier is True,
        "why_not_judged": "; ".join(why) or None,
    }


def fill(records: list[dict[str, Any]]) -> None:
    """Set ``whole_run_checks`` of every adaptive run in ``records``, against the eager
    and torch.compile runs of the same model."""
    by_key = {(r["model"], r["mode"]): r for r in records}
    for r in records:
        if r["mode"].startswith("adaptive"):
            r["whole_run_checks"] = whole_run_checks(
                r, by_key.get((r["model"], "eager")), by_key.get((r["model"], "compile")))

