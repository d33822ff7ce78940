"""A bench run: every (model, mode) in its own process, then the comparisons and the files.

One fresh temporary directory per bench run holds the compile caches (one per model and
mode; ``adaptive_warm`` reuses the directory ``adaptive_cold`` of the same model filled),
each run's outputs for the comparison with eager, and the records; it is removed at
the end. Only ``report.md``, ``report.json``, the chart and the traces go to ``out``.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchneuron.bench import criteria, metrics, modes, zoo
from torchneuron.bench._pool import run_all

__all__ = ["AUTO", "DEFAULT_MAX_STEPS", "DEFAULT_STEPS", "QUICK_STEPS", "compare_with_eager",
           "pacer_mode", "run_suite", "specs_for"]

QUICK_STEPS = 6
DEFAULT_STEPS = 20
AUTO = "auto"  # --steps auto
DEFAULT_MAX_STEPS = 2000  # --steps auto stops here when the last tier is not in
_COST_ORDER = {"adaptive_cold": 0, "compile": 1, "eager": 2, "adaptive_warm": 3, "cpu": 4}


def pacer_mode(mode_names: list[str]) -> str | None:
    """The mode whose run sets its model's step count under ``--steps auto``: adaptive
    eager with a cold cache (the one that has to wait for its compiles), else warm."""
    return next((m for m in ("adaptive_cold", "adaptive_warm") if m in mode_names), None)


def specs_for(models: list[str], mode_names: list[str], steps: int | str, hardware: str,
              tmp: Path, out: Path, trace: bool, zero_compile_latency: bool = False,
              max_steps: int = DEFAULT_MAX_STEPS) -> list[dict[str, Any]]:
    """One spec per (model, mode), the costliest first so that parallel lanes balance.

    ``steps="auto"``: the pacer run of each model (``pacer_mode``) runs until adaptive
    eager's last tier is in, at most ``max_steps``; the model's other modes run after it
    (``after``) for as many steps as it ran (``steps_from``), so that every mode of a
    model covers the same steps and the cumulative figures compare like with like."""
    auto = steps == AUTO
    pacer = pacer_mode(mode_names) if auto else None
    if auto and pacer is None:
        raise ValueError("--steps auto needs adaptive_cold or adaptive_warm among --modes "
                         "(their run decides how many steps every mode runs)")
    specs = []
    for model in models:
        for mode in mode_names:
            cache_mode = modes.DEPENDS_ON.get(mode, mode)
            dep = modes.DEPENDS_ON.get(mode)
            follows = auto and mode != pacer
            if follows:
                dep = dep if dep in mode_names else pacer
            specs.append({
                "model": model, "mode": mode, "hardware": hardware,
                "steps": max_steps if auto else steps, "auto": auto and mode == pacer,
                "steps_from": pacer if follows else None,
                "cache_dir": str(tmp / "cache" / model / cache_mode),
                "outputs_path": str(tmp / "outputs" / f"{model}-{mode}.pt"),
                "record_path": str(tmp / "records" / f"{model}-{mode}.json"),
                "trace_path": (str(out / "traces" / f"{model}-{mode}.json")
                               if trace and mode != "cpu" else None),
                "zero_compile_latency": zero_compile_latency,
                "after": dep if dep in mode_names else None,
            })
    return sorted(specs, key=lambda s: _COST_ORDER.get(s["mode"], 9))


def _preload(models: list[str], mode_names: list[str]) -> None:
    """Import in the parent what every run needs, so forked runs do not pay for it."""
    import torch  # noqa: F401

    import torchneuron  # noqa: F401
    import torchneuron.bench.runner  # noqa: F401
    import torchneuron.compiler  # noqa: F401
    import torchneuron.profiler  # noqa: F401

    if "compile" in mode_names:
        import torch._dynamo  # noqa: F401
    for model in models:
        for module in zoo.get(model).requires:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                importlib.import_module(module)
            except ImportError:
                pass  # the run reports it
    if any(m.startswith("adaptive") for m in mode_names):
        from torchneuron.bench._runtime import adaptive_module

        try:
            adaptive_module()
        except ImportError:
            pass  # the runs report it


def compare_with_eager(records: list[dict[str, Any]], outputs: dict[tuple[str, str], Path]
                       ) -> None:
    """Fill ``max_abs_diff_vs_eager`` from the saved outputs and final state of each run."""
    import torch

    loaded: dict[tuple[str, str], Any] = {}
    for key, path in outputs.items():
        if path.exists():
            loaded[key] = torch.load(path, weights_only=True)
    for r in records:
        mine, eager = loaded.get((r["model"], r["mode"])), loaded.get((r["model"], "eager"))
        if r["status"] == "ok" and mine is not None and eager is not None:
            r["max_abs_diff_vs_eager"] = metrics.max_abs_diff(mine, eager)


def run_suite(models: list[str], mode_names: list[str], steps: int | str, hardware: str,
              out: Path, trace: bool = False, jobs: int = 1, timeout: float = 1800.0,
              zero_compile_latency: bool = False, max_steps: int = DEFAULT_MAX_STEPS,
              on_done: Callable[[dict[str, Any]], None] | None = None
              ) -> tuple[list[dict[str, Any]], float]:
    """Run every (model, mode); return the records in report order and the wall seconds."""
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="torchneuron-bench-"))
    try:
        for sub in ("cache", "outputs", "records"):
            (tmp / sub).mkdir()
        specs = specs_for(models, mode_names, steps, hardware, tmp, out, trace,
                          zero_compile_latency, max_steps)
        _preload(models, mode_names)
        records = run_all(specs, jobs, timeout, on_done or (lambda r: None))
        order = {(m, md): i for i, (m, md) in enumerate(
            (m, md) for m in models for md in mode_names)}
        records.sort(key=lambda r: order[(r["model"], r["mode"])])
        compare_with_eager(records, {(s["model"], s["mode"]): Path(s["outputs_path"])
                                     for s in specs})
        metrics.derive(records)
        criteria.fill(records)
        for r in records:
            if r.get("trace"):
                r["trace"] = os.path.relpath(r["trace"], out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return records, time.perf_counter() - t0
