"""``torchneuron-bench --nproc N``: data-parallel training on N simulated NeuronCores.

Why torchrun: the ranks are started by PyTorch's own launcher (``python -m
torch.distributed.run --standalone --nproc-per-node N``, the elastic agent), exactly as a
user starts a distributed script; nothing here forks ranks or sets their environment. One
launch per (model, parallelism, mode, rank count), one after another (the ranks of a launch
already use the machine's cores); each rank runs ``dist_rank`` and writes its record.

Scaling efficiency is weak scaling: every rank trains on a batch of the workload's size, so
N ranks do N times the work of one; efficiency = (one rank's steady ms per step) / (N
ranks' steady ms per step) with the same parallelism and mode, 1.0 when the collectives
cost nothing or hide entirely behind compute. The one-rank baseline is launched the same way
(a group of one: its collectives cost nothing).

Time in collectives per step is the collective queue's busy time; the overlapped share is
the part of it the compute queue did not have to wait for (``torchneuron.distributed.stats``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchneuron.bench import metrics
from torchneuron.bench.dist_rank import PARALLELS, rank_path

__all__ = ["DIST_FIELDS", "DIST_MODES", "PARALLELS", "nproc_counts", "run_distributed"]

DIST_MODES: tuple[str, ...] = ("eager", "compile", "adaptive_cold")

DIST_FIELDS: dict[str, str] = {
    "model": "zoo workload name (a training workload)",
    "parallel": "ddp (DistributedDataParallel) | fsdp (FSDP2 fully_shard per block and root)",
    "mode": "eager | compile | adaptive_cold",
    "nproc": "ranks (one process and one simulated NeuronCore each, started by torchrun)",
    "status": "ok | error (a rank raised; see reason) | crashed | timeout",
    "reason": "why the run is not ok: the first failing rank's exception or the launcher's",
    "hardware": "simulated hardware profile",
    "steps": "steps run on every rank",
    "step_ms": "rank 0's simulated ms of each step (torch.neuron.Event), list",
    "steady_ms": "the slowest rank's median simulated ms per steady step",
    "steady_ms_per_rank": "each rank's median simulated ms per steady step, list",
    "steady_step": "first steady step of rank 0 (metrics.steady_state)",
    "scaling_efficiency": "weak scaling: one rank's steady_ms / this steady_ms (same "
                          "parallelism and mode); 1.0 = collectives cost nothing or hide",
    "collective_ms_per_step": "rank 0: simulated ms per steady step its collective queue ran",
    "exposed_ms_per_step": "rank 0: of those, ms the compute queue waited for (not hidden)",
    "overlap_pct": "rank 0: share of collective time hidden behind compute, %",
    "compute_ms_per_step": "rank 0: simulated ms per steady step the compute queue was busy",
    "collectives": "rank 0: collectives issued in the whole run",
    "graphs_compiled": "rank 0: programs compiled (torchneuron.compiler.stats())",
    "replays": "rank 0: adaptive eager's region replays (adaptive modes), else None",
    "max_abs_diff_vs_eager": "rank 0: largest |difference| from the eager run with the same "
                             "parallelism and ranks, over every step's loss and the final "
                             "(gathered) parameters",
    "wall_s": "wall-clock seconds of the launch (start-up, compiles, steps)",
    "traceback": "the failing rank's traceback, else None",
}

SIMULATED = ("step_ms", "steady_ms", "steady_ms_per_rank", "steady_step", "scaling_efficiency",
             "collective_ms_per_step", "exposed_ms_per_step", "overlap_pct",
             "compute_ms_per_step", "collectives", "graphs_compiled", "replays")


def nproc_counts(n: int) -> list[int]:
    """The rank counts ``--nproc N`` runs: 1 (the baseline), the powers of two below N, N."""
    if n < 1:
        raise ValueError(f"--nproc must be >= 1, got {n}")
    counts, k = [1], 2
    while k < n:
        counts.append(k)
        k *= 2
    if n > 1:
        counts.append(n)
    return counts


def _empty(model: str, parallel: str, mode: str, nproc: int, hardware: str) -> dict[str, Any]:
    rec: dict[str, Any] = dict.fromkeys(DIST_FIELDS)
    rec.update(model=model, parallel=parallel, mode=mode, nproc=nproc, hardware=hardware,
               steps=0)
    return rec


def _launch(spec: dict[str, Any], nproc: int, timeout: float) -> tuple[str, str]:
    """Start the ranks through torchrun; return (status, launcher output tail)."""
    spec_path = Path(spec["run_dir"]) / "spec.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={nproc}", "--max-restarts=0", "-m",
           "torchneuron.bench.dist_rank", str(spec_path)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if spec.get("zero_compile_latency"):
        env["TORCHNEURON_COMPILE_LATENCY"] = "0"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and the ranks it started
        proc.communicate()
        return "timeout", f"no result within {timeout:.0f} s; killed"
    return ("ok" if proc.returncode == 0 else "failed"), (out or "")[-3000:]


def _steady_mean(values: list[int], first: int) -> float:
    tail = values[first:] or values
    return statistics.fmean(tail) if tail else 0.0


def _merge(rec: dict[str, Any], ranks: list[dict[str, Any]]) -> None:
    """Fill ``rec`` from the ranks' records (all present and ok)."""
    r0 = ranks[0]
    rec["steps"] = r0["steps"]
    rec["step_ms"] = r0["step_ms"]
    steadies = []
    for r in ranks:
        k, ms, _ = metrics.steady_state(r["step_ms"])
        steadies.append(ms)
        if r is r0:
            rec["steady_step"] = k
    rec["steady_ms_per_rank"] = steadies
    rec["steady_ms"] = max(steadies) if all(s is not None for s in steadies) else None
    first = rec["steady_step"] or 0
    coll = _steady_mean(r0["collective_ns"], first)
    exposed = _steady_mean(r0["exposed_ns"], first)
    rec["collective_ms_per_step"] = round(coll / 1e6, 6)
    rec["exposed_ms_per_step"] = round(exposed / 1e6, 6)
    rec["overlap_pct"] = round(100 * (1 - exposed / coll), 1) if coll else None
    rec["compute_ms_per_step"] = round(_steady_mean(r0["compute_ns"], first) / 1e6, 6)
    for k in ("collectives", "graphs_compiled", "replays"):
        rec[k] = r0[k]


def _run_one(spec: dict[str, Any], nproc: int, timeout: float) -> dict[str, Any]:
    rec = _empty(spec["model"], spec["parallel"], spec["mode"], nproc, spec["hardware"])
    t0 = time.perf_counter()
    status, tail = _launch(spec, nproc, timeout)
    rec["wall_s"] = round(time.perf_counter() - t0, 3)
    ranks = [json.loads(p.read_text()) if p.exists() else None
             for p in (rank_path(spec["run_dir"], r) for r in range(nproc))]
    bad = [r for r in ranks if r is None or r["status"] != "ok"]
    if status == "timeout":
        rec.update(status="timeout", reason=tail)
    elif bad:
        first = next((r for r in ranks if r is not None and r["status"] != "ok"), None)
        if first is not None:
            rec.update(status="error", reason=f"rank {first['rank']}: {first['reason']}",
                       traceback=first["traceback"])
        else:
            rec.update(status="crashed", reason="a rank exited without a record; torchrun "
                       "said:\n" + tail[-1500:])
    else:
        rec["status"] = "ok"
        _merge(rec, ranks)  # type: ignore[arg-type]
    return rec


def _derive(records: list[dict[str, Any]], outputs: dict[tuple, Path]) -> None:
    """Scaling efficiency against one rank; differences from eager's run."""
    import torch

    by_key = {(r["model"], r["parallel"], r["mode"], r["nproc"]): r for r in records}
    for r in records:
        if r["status"] != "ok":
            continue
        base = by_key.get((r["model"], r["parallel"], r["mode"], 1))
        if base and base["status"] == "ok" and base["steady_ms"] and r["steady_ms"]:
            r["scaling_efficiency"] = round(base["steady_ms"] / r["steady_ms"], 4)
        key = (r["model"], r["parallel"], r["mode"], r["nproc"])
        eager = (r["model"], r["parallel"], "eager", r["nproc"])
        if key in outputs and eager in outputs and outputs[key].exists() \
                and outputs[eager].exists():
            a = torch.load(outputs[key], weights_only=True)
            b = torch.load(outputs[eager], weights_only=True)
            r["max_abs_diff_vs_eager"] = metrics.max_abs_diff(a, b)


def run_distributed(models: list[str], parallels: list[str], mode_names: list[str],
                    nprocs: list[int], steps: int, hardware: str, timeout: float = 1800.0,
                    zero_compile_latency: bool = False, group_timeout: float = 600.0,
                    on_done: Callable[[dict[str, Any]], None] | None = None
                    ) -> tuple[list[dict[str, Any]], float]:
    """Run every (model, parallelism, mode, rank count); return the records (in that
    order) and the wall seconds."""
    bad = [m for m in mode_names if m not in DIST_MODES]
    if bad:
        raise ValueError(f"--nproc runs the modes {', '.join(DIST_MODES)}; not "
                         f"{', '.join(bad)}")
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="torchneuron-bench-dist-"))
    records: list[dict[str, Any]] = []
    outputs: dict[tuple, Path] = {}
    try:
        for model in models:
            for parallel in parallels:
                for mode in mode_names:
                    for n in nprocs:
                        name = f"{model}-{parallel}-{mode}-{n}"
                        run_dir = tmp / name
                        run_dir.mkdir()
                        spec = {"model": model, "parallel": parallel, "mode": mode,
                                "steps": steps, "hardware": hardware,
                                "cache_dir": str(tmp / "cache" / name),
                                "run_dir": str(run_dir),
                                "outputs_path": str(run_dir / "outputs.pt"),
                                "zero_compile_latency": zero_compile_latency,
                                "group_timeout": group_timeout}
                        rec = _run_one(spec, n, timeout)
                        outputs[(model, parallel, mode, n)] = Path(spec["outputs_path"])
                        records.append(rec)
                        if on_done is not None:
                            on_done(rec)
        _derive(records, outputs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return records, time.perf_counter() - t0
