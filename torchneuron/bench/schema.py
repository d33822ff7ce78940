"""The record: one per (model, mode), every field always present (None = not applicable).

Why a table of fields: the runner fills it, the report prints it, the tests validate it,
and ``report.json`` readers get the meaning of each key from the same place. Simulated
figures (``SIMULATED``) come from the runtime's own clock and counters and are identical
on every run; wall-clock figures are measured on this machine and vary.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FIELDS", "SIMULATED", "STATUSES", "empty_record", "validate"]

STATUSES = ("ok", "error", "not run", "crashed", "timeout")

FIELDS: dict[str, str] = {
    "model": "zoo workload name",
    "mode": "eager | adaptive_cold | adaptive_warm | compile | cpu",
    "status": "ok | error (raised; see reason) | not run (see reason) | crashed | timeout",
    "reason": "why the run is not ok: the runtime's own exception or message",
    "description": "what the workload is",
    "hardware": "simulated hardware profile (trn2 | trn3)",
    "steps": "steps measured",
    "steps_cap": "--steps auto, the run that sets its model's steps: the most it could run "
                 "(--max-steps); None otherwise",
    "last_tier_step": "--steps auto: the step (1-based) after which adaptive eager's last "
                      "tier was in (compiled programs replayed, no region hot or compiling); "
                      "the run ended a few steps later. None if not reached or not auto",
    "steps_cap_hit": "--steps auto: True when the run stopped at --max-steps before the last "
                     "tier was in; None when not auto",
    "step_ms": "simulated ms of each step (torch.neuron.Event), list",
    "first_step_ms": "simulated ms of step 0",
    "steady_ms": "median simulated ms per step from steady_step on",
    "steady_step": "first step of steady state (see metrics.steady_state; --steps auto: "
                   "among the steps after last_tier_step)",
    "steady_reached": "whether at least two steps were steady",
    "speedup_vs_eager": "eager steady_ms / this steady_ms",
    "gap_closed": "(eager - this) / (eager - compile) of steady_ms; 1.0 = as fast as compile",
    "compile_ms_critical_path": "modeled compile latency the host waited for (eager NEFF "
                                "compiles and program compiles), simulated ms",
    "compile_ms_background": "modeled compile latency on the background compiler queue "
                             "(adaptive eager), simulated ms",
    "compile_ms_total": "critical path + background, simulated ms",
    "eager_kernel_compiles": "new eager (op, shapes, dtypes) signatures compiled",
    "graphs_compiled": "programs compiled (torchneuron.compiler.stats()['compilations'])",
    "compile_failures": "programs the compiler refused (typed errors; they ran eagerly)",
    "cumulative_ms": "simulated ms of the run so far after N steps, N -> ms for N in 1, 10, "
                     "100, 1000 (those the run reached) and the run's last step",
    "below_eager_from": "first step (1-based) from which this run's cumulative simulated time "
                        "stays at or below eager's to the end of the run, or None",
    "below_compile_from": "first step (1-based) from which this run's cumulative simulated "
                          "time stays at or below torch.compile's to the end, or None",
    "whole_run_checks": "adaptive modes: issue 20's full-report criteria over the whole run "
                        "(bench.criteria): at_or_below_eager (cumulative at most eager's after "
                        "every step from at_or_below_eager_from_step on), "
                        "at_or_below_compile_every_step, last_tier_in (--steps auto), "
                        "most_above_eager / most_above_compile ([step, ms] furthest above, or "
                        "None), met (all hold), why_not_judged; None otherwise",
    "regions": "regions detected by adaptive eager",
    "replays": "region replays by adaptive eager",
    "executables": "distinct executables launched",
    "executable_launches": "executable launches in the whole run",
    "cache_hits": "compile-cache hits reported by the runtime",
    "side_exits": "adaptive eager side exits",
    "fallbacks": "reason -> count: CPU-fallback ops, compile failures, eager fallback runs, "
                 "adaptive eager fallbacks",
    "max_abs_diff_vs_eager": "largest |difference| from the eager run over every step's "
                             "output and the final parameters and buffers",
    "ops_per_step": "aten ops dispatched on the device in the last step",
    "host_wall_ms_per_step": "median host wall-clock ms per steady step (measured)",
    "host_us_per_op": "host_wall_ms_per_step over eager's ops_per_step, in µs (measured)",
    "device_busy_pct_last_step": "device busy time / step time in the last step, %",
    "host_ms_by_category_last_step": "simulated host ms by category in the last step",
    "roofline_pct": "compiled programs of the last step: simulated time as % of their "
                    "roofline (100 = at the roofline)",
    "wall_s": "wall-clock seconds of the whole run (set-up, compiles, steps)",
    "cpu_s": "CPU seconds of the run's process (user + system; the compile worker's excluded)",
    "trace": "Chrome trace of the last step, relative to the report, or None",
    "adaptive_stats": "torchneuron.adaptive_eager.stats() at the end, or None",
    "compiler_stats": "torchneuron.compiler.stats() at the end (compile seconds are wall)",
    "traceback": "the exception's traceback when status is error, else None",
}

SIMULATED = (
    "step_ms", "last_tier_step", "steps_cap_hit", "first_step_ms", "steady_ms", "steady_step",
    "steady_reached",
    "speedup_vs_eager", "gap_closed", "cumulative_ms", "below_eager_from",
    "below_compile_from", "whole_run_checks", "compile_ms_critical_path", "compile_ms_background",
    "compile_ms_total", "eager_kernel_compiles", "graphs_compiled", "compile_failures",
    "regions", "replays", "executables", "executable_launches", "cache_hits", "side_exits",
    "fallbacks", "max_abs_diff_vs_eager", "ops_per_step", "device_busy_pct_last_step",
    "host_ms_by_category_last_step", "roofline_pct",
)


def empty_record(model: str, mode: str) -> dict[str, Any]:
    """A record with every field, all None but the key."""
    rec: dict[str, Any] = dict.fromkeys(FIELDS)
    rec.update(model=model, mode=mode)
    return rec


def validate(record: dict[str, Any]) -> list[str]:
    """Problems with ``record`` (empty when it is well formed)."""
    problems = [f"missing field {k!r}" for k in FIELDS if k not in record]
    problems += [f"unknown field {k!r}" for k in record if k not in FIELDS]
    if record.get("status") not in STATUSES:
        problems.append(f"status {record.get('status')!r} not in {STATUSES}")
    if record.get("status") != "ok" and not record.get("reason"):
        problems.append("a run that is not ok must say why (reason)")
    if record.get("status") == "ok" and record.get("mode") != "cpu":
        steps = record.get("step_ms")
        if not isinstance(steps, list) or len(steps) != record.get("steps"):
            problems.append("step_ms must list one simulated time per step")
    return problems
