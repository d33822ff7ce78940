"""Run one (model, mode) and measure it: the body of each benchmark process.

Every simulated figure is read from the runtime: step times from ``torch.neuron.Event``
pairs around each step, compile latency and host costs from the core's timeline
(``get_core(0).stats()``), compilations and failures from ``torchneuron.compiler.stats()``,
executables' times and rooflines from the profiler's view of the last step, adaptive
eager's counts from its ``stats()``. Wall-clock time is measured around each step with
``time.perf_counter`` and kept apart: it never feeds simulated time.

Each step ends with an event synchronize (as a loop that logs its loss does), then the
step's output is read back to the host for the comparison with eager; that read lies
outside the timed interval.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

from torchneuron.bench import _runtime, metrics, modes, schema, zoo

__all__ = ["AUTO_TAIL", "run_one"]

AUTO_TAIL = 3  # --steps auto: steps measured after the last tier is in (a steady state)


def _short(e: BaseException) -> str:
    """The exception's type and first line, and those of its cause when it has one (Dynamo
    wraps the error that matters)."""
    parts = []
    seen = 0
    cur: BaseException | None = e
    while cur is not None and seen < 2:
        lines = str(cur).strip().splitlines()
        parts.append(f"{type(cur).__name__}: {lines[0][:300] if lines else ''}".rstrip(": "))
        cur = cur.__cause__
        seen += 1
    return " (caused by ".join(parts) + ")" * (len(parts) - 1)


def _to_cpu(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return out.detach().cpu().clone()
    if isinstance(out, (list, tuple)):
        return [_to_cpu(o) for o in out]
    return out


def _configure(spec: dict[str, Any]) -> None:
    """Settings of this process, before anything reads them."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if spec.get("zero_compile_latency"):
        os.environ["TORCHNEURON_COMPILE_LATENCY"] = "0"
    import torch

    from torchneuron.hardware import settings

    torch.set_num_threads(1)
    _runtime.use_cache_dir(spec.get("cache_dir"))
    settings.set_hardware(spec["hardware"])
    if spec.get("zero_compile_latency"):
        settings.set_value("compile_latency", False)


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``spec`` (model, mode, steps, hardware, cache_dir, outputs_path, trace_path,
    zero_compile_latency) and return its record (see ``schema.FIELDS``)."""
    rec = schema.empty_record(spec["model"], spec["mode"])
    workload = zoo.get(spec["model"])
    rec.update(description=workload.description, hardware=spec["hardware"], steps=0)
    t_start = time.perf_counter()
    try:
        _configure(spec)
        for module in workload.requires:
            __import__(module)
        if spec["mode"].startswith("adaptive"):
            _runtime.adaptive_module()
    except ImportError as e:
        rec.update(status="not run", reason=_short(e), wall_s=0.0)
        return rec
    try:
        _measure(spec, workload, rec)
    except Exception as e:  # noqa: BLE001 - the report says why, from the exception
        rec.update(status="error", reason=_short(e))
        rec["traceback"] = traceback.format_exc(limit=8)
    rec["wall_s"] = round(time.perf_counter() - t_start, 3)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rec["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 3)
    return rec


def _measure(spec: dict[str, Any], workload: zoo.Workload, rec: dict[str, Any]) -> None:
    import torch

    import torchneuron
    import torchneuron.compiler as tc
    from torchneuron import hardware
    from torchneuron.profiler import profile

    mode, steps = spec["mode"], int(spec["steps"])
    on_device = mode != "cpu"
    # --steps auto (the pacer run of its model): at most ``steps``, ending AUTO_TAIL steps
    # after the one in which adaptive eager's last tier is in (``_runtime.last_tier_in``)
    auto = bool(spec.get("auto")) and mode.startswith("adaptive")
    if auto:
        rec["steps_cap"] = steps
    hardware.reset()
    tc.reset_stats()
    outputs: list[Any] = []
    step_ms: list[float] = []
    wall_ms: list[float] = []
    prof = None
    before: dict[str, Any] = {}
    torch.manual_seed(0)
    task = workload.build(modes.device_of(mode))
    modes.prepare(mode, task)
    torch.manual_seed(0)  # every mode's random ops start from the same generator state
    with modes.scope(mode):
        try:
            i = 0
            while i < steps:
                last = i == steps - 1
                if on_device and last:
                    before = hardware.get_core(0).stats()
                    prof = profile([0])
                    prof.start()
                ms, wall, out = _one_step(task, i, on_device)
                if prof is not None and last:
                    prof.stop()
                step_ms.append(ms)
                wall_ms.append(wall)
                outputs.append(_to_cpu(out))
                rec["steps"] = i + 1
                if auto and rec["last_tier_step"] is None and _runtime.last_tier_in(
                        _runtime.adaptive_summary(explain=False)[0]):
                    rec["last_tier_step"] = i + 1
                    steps = min(steps, i + 1 + AUTO_TAIL)
                i += 1
        finally:
            if prof is not None:
                prof.stop()
    state = {k: _to_cpu(v) for k, v in task.state().items()}
    Path(spec["outputs_path"]).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"outputs": outputs, "state": state}, spec["outputs_path"])
    rec["status"] = "ok"
    if auto:
        rec["steps_cap_hit"] = rec["last_tier_step"] is None
    if on_device:
        rec["step_ms"] = step_ms
        rec["first_step_ms"] = step_ms[0] if step_ms else None
        # --steps auto: the steady state is that of the steps after the last tier is in
        # (the run's last half is mostly first-tier steps, whose median is not the end's)
        lo = rec["last_tier_step"] or 0
        k, rec["steady_ms"], rec["steady_reached"] = metrics.steady_state(step_ms[lo:])
        rec["steady_step"] = k + lo if k is not None else None
    _wall_figures(rec, wall_ms)
    if not on_device:
        return
    _core_figures(rec, before, hardware.get_core(0).stats(), step_ms[-1] if step_ms else 0.0)
    _compile_figures(rec, hardware.get_core(0), tc.stats(), torchneuron.fallback_ops(),
                     torchneuron.fallback_reasons())
    if prof is not None:
        exes = prof.executables()
        roof = sum(e["roofline_ns"] for e in exes.values())
        if exes and roof:
            rec["roofline_pct"] = round(100 * sum(e["device_ns"] for e in exes.values()) / roof, 1)
        if spec.get("trace_path"):
            prof.export_chrome_trace(spec["trace_path"])
            rec["trace"] = spec["trace_path"]


def _one_step(task: Any, i: int, on_device: bool) -> tuple[float, float, Any]:
    """(simulated ms, wall ms, output) of step ``i``."""
    import torch

    if not on_device:
        t0 = time.perf_counter()
        out = task.step(i)
        return 0.0, (time.perf_counter() - t0) * 1e3, out
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    out = task.step(i)
    end.record()
    end.synchronize()
    wall = (time.perf_counter() - t0) * 1e3
    return float(start.elapsed_time(end)), wall, out


def _wall_figures(rec: dict[str, Any], wall_ms: list[float]) -> None:
    """Median wall ms over the steady steps (all but the first when unknown), leaving out
    the profiled last step when others remain."""
    first = rec["steady_step"] if rec["steady_step"] is not None else min(1, len(wall_ms) - 1)
    steady = wall_ms[max(0, first):]
    if len(steady) > 1:
        steady = steady[:-1]
    rec["host_wall_ms_per_step"] = round(statistics.median(steady), 3) if steady else None


def _core_figures(rec: dict[str, Any], before: dict[str, Any], after: dict[str, Any],
                  last_ms: float) -> None:
    ops = sum(after["ops"].values()) - sum(before.get("ops", {}).values())
    rec["ops_per_step"] = ops
    busy = after["device_busy_ns"] - before.get("device_busy_ns", 0)
    rec["device_busy_pct_last_step"] = round(100 * busy / (last_ms * 1e6), 1) if last_ms else None
    cats = before.get("host_ns_by_category", {})
    rec["host_ms_by_category_last_step"] = {
        k: round((v - cats.get(k, 0)) / 1e6, 6)
        for k, v in after["host_ns_by_category"].items() if v - cats.get(k, 0)
    }
    rec["compile_ms_critical_path"] = after["host_ns_by_category"].get("compile", 0) / 1e6
    rec["eager_kernel_compiles"] = after["eager_compiles"]
    rec["executables"] = len(after["executables"])
    rec["executable_launches"] = after["executable_launches"]


def _compile_figures(rec: dict[str, Any], core: Any, cstats: dict[str, Any],
                     cpu_fallback: dict[str, int], cpu_reasons: dict[str, str]) -> None:
    astats, _ = _runtime.adaptive_summary() if rec["mode"].startswith("adaptive") else (None, None)
    rec["compiler_stats"] = cstats
    rec["adaptive_stats"] = astats
    rec["graphs_compiled"] = cstats["compilations"]
    rec["compile_failures"] = cstats["failures"]
    rec["cache_hits"] = _runtime.cache_hits(cstats, astats)
    bg = _runtime.background_compile_ns(core)
    rec["compile_ms_background"] = bg / 1e6 if bg is not None else None
    rec["compile_ms_total"] = rec["compile_ms_critical_path"] + (rec["compile_ms_background"] or 0)
    fallbacks: dict[str, int] = {}
    for op, n in sorted(cpu_fallback.items()):
        fallbacks[f"CPU fallback {op}: {cpu_reasons.get(op, '?')}"] = n
    for key, n in cstats["failures_by_stage"].items():
        fallbacks[f"compile failed at {key}"] = n
    for name, n in cstats["eager_fallback_runs"].items():
        fallbacks[f"graph {name} ran eagerly after its compile failed"] = n
    if astats is not None:
        for reason, n in dict(astats.get("fallback_reasons", {})).items():
            fallbacks[f"adaptive eager: {reason}"] = int(n)
        rec["regions"] = astats.get("regions_detected")
        rec["replays"] = astats.get("replays")
        rec["side_exits"] = astats.get("side_exits")
    rec["fallbacks"] = fallbacks


def main(argv: list[str] | None = None) -> int:
    """``python -m torchneuron.bench.runner SPEC.json``: run one spec, write its record."""
    import json
    import sys

    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(args[0]).read_text())
    record = run_one(spec)
    Path(spec["record_path"]).write_text(json.dumps(record, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
