"""One rank of a distributed bench run: ``python -m torchneuron.bench.dist_rank SPEC.json``.

Started by torchrun (``torch.distributed.run``, see ``dist_suite``), once per rank, with
the environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` ...). The rank
joins the ``"neuron"`` process group, builds the zoo workload on ``neuron``, wraps it as a
user would for data parallelism (``DistributedDataParallel``, or FSDP2's ``fully_shard`` on
every module of an ``nn.ModuleList`` and on the root), applies the mode's one-line change
(``torch.compile``, adaptive eager) and runs the steps, timing each with
``torch.neuron.Event`` pairs as the single-process runner does.

What it measures per step, all on the simulated clock: the step time; the time the rank's
collective queue was busy; the part of it the compute queue had to wait for (exposed: not
hidden behind compute); the compute queue's busy time. Wall-clock time is kept apart.

Each rank's data: the workload's batches rotated by the rank, so ranks train on different
batches (weak scaling: every rank's batch has the workload's size).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

__all__ = ["PARALLELS", "rank_path", "run_rank"]

PARALLELS: tuple[str, ...] = ("ddp", "fsdp")


def rank_path(run_dir: str | Path, rank: int) -> Path:
    """Where rank ``rank`` of a run writes its record."""
    return Path(run_dir) / f"rank{rank}.json"


def _wrap(task: Any, parallel: str, world: int) -> None:
    """The user's data-parallel wrapping of ``task.module`` (``task.model`` calls it)."""
    import torch
    from torch import nn

    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        task.model = DistributedDataParallel(task.module)
        return
    if parallel != "fsdp":
        raise ValueError(f"unknown parallelism {parallel!r}; known: {', '.join(PARALLELS)}")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("neuron", (world,))
    for module in list(task.module.modules()):
        if isinstance(module, nn.ModuleList):
            for block in module:
                fully_shard(block, mesh=mesh)
    fully_shard(task.module, mesh=mesh)
    task.model = task.module
    # fully_shard replaced the parameters (DTensor shards): the optimizer is built again
    # over them, with the same settings, as a user's script builds it after wrapping
    opt = task.optimizer
    accepted = inspect.signature(type(opt)).parameters
    task.optimizer = type(opt)(task.module.parameters(),
                               **{k: v for k, v in opt.defaults.items() if k in accepted})
    assert isinstance(task.optimizer, torch.optim.Optimizer)


def _full_state(module: Any) -> dict[str, Any]:
    """Parameters and buffers, gathered whole (every rank calls this: FSDP2's shards are
    gathered with a collective)."""
    from torch.distributed.tensor import DTensor

    out = {}
    for k, v in module.state_dict().items():
        v = v.full_tensor() if isinstance(v, DTensor) else v
        out[k] = v.detach().cpu().clone()
    return out


def run_rank(spec: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    """Run ``spec`` (model, parallel, mode, steps, hardware, cache_dir, outputs_path,
    zero_compile_latency, group_timeout) as rank ``rank`` of ``world``; return its record."""
    from torchneuron.bench import runner

    rec: dict[str, Any] = {"rank": rank, "world": world, "status": "error", "reason": None,
                           "steps": 0, "step_ms": [], "collective_ns": [], "exposed_ns": [],
                           "compute_ns": [], "replays": None, "graphs_compiled": None,
                           "collectives": None, "traceback": None}
    t0 = time.perf_counter()
    try:
        runner._configure(spec)
        import torch.distributed as dist

        import torchneuron  # noqa: F401  (registers the device and the "neuron" backend)

        dist.init_process_group(
            "neuron", timeout=timedelta(seconds=float(spec.get("group_timeout", 600))))
        try:
            _measure(spec, rank, world, rec)
        finally:
            dist.destroy_process_group()
        rec["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - the report says why, from the exception
        rec.update(status="error", reason=runner._short(e),
                   traceback=traceback.format_exc(limit=8))
    rec["wall_s"] = round(time.perf_counter() - t0, 3)
    return rec


def _measure(spec: dict[str, Any], rank: int, world: int, rec: dict[str, Any]) -> None:
    import torch

    import torchneuron.compiler as tc
    from torchneuron import distributed, hardware
    from torchneuron.bench import _runtime, modes, runner, zoo

    mode, steps = spec["mode"], int(spec["steps"])
    hardware.reset()
    tc.reset_stats()
    torch.manual_seed(0)
    task = zoo.get(spec["model"]).build("neuron")
    if hasattr(task, "batches") and task.batches:
        k = rank % len(task.batches)
        task.batches = task.batches[k:] + task.batches[:k]
    _wrap(task, spec["parallel"], world)
    if mode == "compile":
        task.model = torch.compile(task.model, backend="neuron")
    torch.manual_seed(0)
    outputs = []
    core = hardware.get_core(0)
    with modes.scope(mode):
        for i in range(steps):
            before = distributed.stats(0)
            busy0 = core.timeline.device_busy_ns
            ms, _wall, out = runner._one_step(task, i, True)
            after = distributed.stats(0)
            rec["step_ms"].append(ms)
            rec["collective_ns"].append(after["collective_ns"] - before["collective_ns"])
            rec["exposed_ns"].append(after["exposed_ns"] - before["exposed_ns"])
            rec["compute_ns"].append(core.timeline.device_busy_ns - busy0)
            outputs.append(runner._to_cpu(out))
            rec["steps"] = i + 1
    rec["collectives"] = distributed.stats(0)["collectives"]
    rec["graphs_compiled"] = tc.stats()["compilations"]
    if mode.startswith("adaptive"):
        stats, _ = _runtime.adaptive_summary(explain=False)
        rec["replays"] = (stats or {}).get("replays")
    state = _full_state(task.module)
    if rank == 0:
        Path(spec["outputs_path"]).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"outputs": outputs, "state": state}, spec["outputs_path"])


def main(argv: list[str] | None = None) -> int:
    """Run the spec in ``argv[0]`` as the rank torchrun's environment names."""
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(args[0]).read_text())
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    rec = run_rank(spec, rank, world)
    rank_path(spec["run_dir"], rank).write_text(json.dumps(rec, default=str))
    return 0 if rec["status"] == "ok" else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # the record is written and the group destroyed: skip the interpreter's teardown of
    # torch (seconds per rank on a loaded machine); the compile worker exits on its EOF
    os._exit(code)
