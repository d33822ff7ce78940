"""Data-parallel scaling of the zoo's GPT on simulated NeuronCores (DDP and FSDP2, eager).

    python benchmarks/distributed_scaling.py --nproc 1,2 --parallel ddp,fsdp --steps 4

For each (parallelism, ranks) the script launches the ranks itself through PyTorch's launcher
(``python -m torch.distributed.run``), each rank trains the zoo's GPT (``torchneuron.bench``'s
``gpt`` workload, the same batch per rank: weak scaling) on the "neuron" backend, and rank 0
reports the simulated ms per step (steady state: the steps after the first), the scaling
efficiency against one rank (t1 / tN: with a fixed per-rank batch, 100% is perfect), the
time in collectives per step and the share of it that overlapped compute.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile


def _rank(parallel: str, steps: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    import torchneuron
    import torchneuron.distributed as tnd
    from torchneuron.bench.zoo import get
    from torchneuron.hardware import get_core

    dist.init_process_group("neuron")
    rank = dist.get_rank()
    task = get("gpt").build("neuron")
    module = task.module
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        task.model = DDP(module)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("neuron", (dist.get_world_size(),))
        for block in module.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(module, mesh=mesh)
        task.optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3, weight_decay=0.01)
    core = get_core(torchneuron.device.module.current_device())
    marks = []
    for i in range(steps):
        task.step(i)
        torchneuron.device.module.synchronize()
        s = tnd.stats(core.index)
        marks.append((core.timeline.host_ns, s["collective_ns"], s["exposed_ns"]))
    steady = steps - 1
    t, c, e = (marks[-1][k] - marks[0][k] for k in range(3))
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"ms_per_step": t / steady / 1e6, "collective_ms": c / steady / 1e6,
                       "exposed_ms": e / steady / 1e6}, f)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", default="1,2")
    parser.add_argument("--parallel", default="ddp,fsdp")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rank-worker", nargs=2, metavar=("PARALLEL", "OUT"))
    args = parser.parse_args()
    if args.rank_worker:
        _rank(args.rank_worker[0], args.steps, args.rank_worker[1])
        return 0
    rows = []
    for parallel in args.parallel.split(","):
        base = None
        for n in (int(x) for x in args.nproc.split(",")):
            out = tempfile.mktemp(suffix=".json")
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}",
                   "--master-addr=127.0.0.1", f"--master-port={_free_port()}", __file__,
                   "--steps", str(args.steps), "--rank-worker", parallel, out]
            subprocess.run(cmd, check=True, env=os.environ.copy(), timeout=1200,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(out) as f:
                r = json.load(f)
            os.unlink(out)
            base = base or r["ms_per_step"]
            overlap = 1 - r["exposed_ms"] / r["collective_ms"] if r["collective_ms"] else 0.0
            rows.append((parallel, n, r["ms_per_step"], base / r["ms_per_step"],
                         r["collective_ms"], overlap))
    print(f"{'parallel':<8} {'ranks':>5} {'ms/step':>10} {'efficiency':>10} "
          f"{'coll ms/step':>12} {'overlap':>8}")
    for p, n, ms, eff, coll, ov in rows:
        print(f"{p:<8} {n:>5} {ms:>10.3f} {eff:>10.1%} {coll:>12.4f} {ov:>8.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
