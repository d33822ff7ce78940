"""Counters of the compile path: what compiled, what failed where and why, and how long.

A stage that cannot handle a graph fails loudly with a typed ``CompileError``; the
caller falls back and records it here, so ``stats()`` / ``explain()`` show where
every graph went. Compile times are host wall-clock seconds by stage (measured, so
noisy); simulated compile latency lives on the device timeline instead.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from torchneuron.hardware import state

__all__ = ["stats", "explain", "reset_stats", "record_success", "record_failure",
           "record_cache"]

_counts: Counter[str] = Counter()
_failures: Counter[tuple[str, str]] = Counter()
_failure_examples: dict[tuple[str, str], str] = {}
_stage_seconds: defaultdict[str, float] = defaultdict(float)
_fallback_runs: Counter[str] = Counter()


def record_stage_time(stage: str, seconds: float) -> None:
    _stage_seconds[stage] += seconds


def record_success(source: str) -> None:
    _counts["compilations"] += 1
    _counts[f"compilations.{source}"] += 1


def record_failure(source: str, stage: str, reason: str, message: str) -> None:
    _counts["failures"] += 1
    _counts[f"failures.{source}"] += 1
    key = (stage, reason)
    _failures[key] += 1
    _failure_examples.setdefault(key, message.splitlines()[0][:300] if message else "")


def record_cache(event: str) -> None:
    """A cache lookup of ``compile_graph``: "hits", "misses", or "corrupt" (an entry that
    did not load; the call then compiles, and counts a miss too)."""
    _counts[f"cache_{event}"] += 1


def record_fallback_run(name: str) -> None:
    _fallback_runs[name] += 1


def stats() -> dict[str, Any]:
    """Compilations, failures by stage and reason, compile seconds by stage, eager fallbacks,
    and cache lookups (``cache``: executables a store served, lookups that compiled, and
    entries that did not load and were rebuilt, counted as misses too)."""
    return {
        "compilations": _counts["compilations"],
        "failures": _counts["failures"],
        "by_source": {k: v for k, v in sorted(_counts.items()) if "." in k},
        "failures_by_stage": {
            f"{stage}:{reason}": n for (stage, reason), n in sorted(_failures.items())
        },
        "compile_seconds_by_stage": {k: round(v, 6) for k, v in sorted(_stage_seconds.items())},
        "eager_fallback_runs": dict(sorted(_fallback_runs.items())),
        "cache": {"hits": _counts["cache_hits"], "misses": _counts["cache_misses"],
                  "corrupt": _counts["cache_corrupt"]},
    }


def explain() -> str:
    """A human-readable account of the compile path so far."""
    s = stats()
    lines = [f"compilations: {s['compilations']}, failures: {s['failures']}"]
    c = s["cache"]
    if any(c.values()):
        lines.append(f"cache: {c['hits']} hits, {c['misses']} misses ({c['corrupt']} corrupt)")
    if s["compile_seconds_by_stage"]:
        lines.append("compile time by stage (host wall clock):")
        for stage, sec in s["compile_seconds_by_stage"].items():
            lines.append(f"  {stage:<10} {sec * 1e3:10.1f} ms")
    if _failures:
        lines.append("failures (stage:reason  count  first message):")
        for (stage, reason), n in sorted(_failures.items()):
            lines.append(f"  {stage}:{reason}  {n}  {_failure_examples[(stage, reason)]}")
    if _fallback_runs:
        lines.append("graphs run eagerly after a failed compile:")
        for name, n in sorted(_fallback_runs.items()):
            lines.append(f"  {name}: {n} runs")
    return "\n".join(lines)


def reset_stats() -> None:
    _counts.clear()
    _failures.clear()
    _failure_examples.clear()
    _stage_seconds.clear()
    _fallback_runs.clear()


# The compiler's section of torchneuron.reset() / torchneuron.stats().
state.register("compiler", reset=reset_stats, stats=stats)
