"""Start the ranks of a distributed test and collect what each saved.

Why plain processes with torchrun's environment (and torchrun itself for one test): each rank
is a real process with its own simulated NeuronCore, as under ``torchrun``; a wall-clock
timeout kills every rank, so a failing rank never hangs the test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import torch

WORKER = Path(__file__).with_name("_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(scenarios: str, outdir: Path, nproc: int = 2, *, torchrun: bool = False,
              timeout: float = 120, group_timeout: float = 20) -> list[dict]:
    """Run ``_worker.py scenarios outdir`` on ``nproc`` ranks; return rank -> results of the
    first scenario (others are in ``outdir``). Raises with the ranks' output on failure."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(nproc), TN_DIST_TIMEOUT=str(group_timeout),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    args = [str(WORKER), scenarios, str(outdir)]
    if torchrun:
        cmds = [[sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                 "--master-addr=127.0.0.1", f"--master-port={env['MASTER_PORT']}", *args]]
        envs = [env]
    else:
        cmds = [[sys.executable, *args] for _ in range(nproc)]
        envs = [dict(env, RANK=str(r), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(nproc))
                for r in range(nproc)]
    procs = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for c, e in zip(cmds, envs, strict=True)]
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            outputs.append(out)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise AssertionError(f"ranks did not finish within {timeout} s: {scenarios}") from None
    first = scenarios.split(",")[0]
    results = []
    for r in range(nproc):
        path = outdir / f"{first}.{r}.pt"
        if not path.exists():
            raise AssertionError(f"rank {r} saved no {first} results; output:\n"
                                 + "\n".join(o[-4000:] for o in outputs))
        results.append(torch.load(path, weights_only=False))
    return results


def load(outdir: Path, scenario: str, nproc: int = 2) -> list[dict]:
    return [torch.load(outdir / f"{scenario}.{r}.pt", weights_only=False) for r in range(nproc)]
