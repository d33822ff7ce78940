"""Host CPU and wall time per step of a zoo model: eager, or adaptive eager recording,
cold (default latency model) or with compile latency zeroed (issue 20's host cost).

    python tools/ae_host_cost.py mlp 40 eager|recording|adaptive|nolat [prof]

Prints medians over steps 1.. of wall, process CPU (all threads: the background compile
too) and main-thread CPU per step, the simulated total and adaptive eager's counters;
``prof`` adds a cProfile of the main thread (``FROM=k`` from step k on, ``SORT``,
``FILT``, ``N``). The backward runs on the calling thread
(``set_multithreading_enabled(False)``), so the main thread's CPU and the profile include
it (PyTorch otherwise runs a device's backward on a worker thread). ``recording`` makes
no region hot (``ae_hot_threshold`` out of reach); the compile cache is off unless
``TORCHNEURON_CACHE`` says otherwise. Wall time on a loaded machine swings by 2x between
runs: compare modes within one run of this tool, on a quiet machine, or by process CPU.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import sys
import time

os.environ.setdefault("TORCHNEURON_CACHE", "0")

import torch  # noqa: E402

import torchneuron  # noqa: E402, F401
import torchneuron.adaptive_eager as ae  # noqa: E402
from torchneuron import hardware  # noqa: E402
from torchneuron.bench import zoo  # noqa: E402
from torchneuron.hardware import settings  # noqa: E402

MODES = {"eager": {}, "adaptive": {}, "recording": {"ae_hot_threshold": 10**9},
         "nolat": {"compile_latency": False}}


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[2] not in MODES:
        print(__doc__)
        return 2
    name, steps, mode = argv[0], int(argv[1]), argv[2]
    pr = cProfile.Profile() if argv[3:] == ["prof"] else None
    start = int(os.environ.get("FROM", "0"))
    torch.set_num_threads(1)
    torch.autograd.set_multithreading_enabled(False).__enter__()
    wall, cpu, thr = [], [], []
    with settings.override(**MODES[mode]):
        task = zoo.get(name).build("neuron")
        hardware.reset()
        if mode != "eager":
            ae.reset()
            ae.enable()
        for i in range(steps):
            t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
            if pr is not None and i >= start:
                pr.enable()
            out = task.step(i)
            if isinstance(out, torch.Tensor):
                out.cpu()
            if pr is not None:
                pr.disable()
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            thr.append(time.thread_time() - h0)
        stats = ae.stats() if mode != "eager" else {}
        if mode != "eager":
            ae.disable()
    now = hardware.get_core(0).now

    def med(xs: list[float]) -> float:
        return statistics.median(xs) * 1e3

    print(f"{name} {mode}: ms/step (median, steps 1..) wall {med(wall[1:]):.2f}, process CPU "
          f"{med(cpu[1:]):.2f}, main thread {med(thr[1:]):.2f}; process CPU of the run "
          f"{sum(cpu) * 1e3:.0f} ms; simulated {now / 1e6:.1f} ms; replays "
          f"{stats.get('replays')} (first tier {stats.get('first_tier_replays')}), ops "
          f"recorded {stats.get('ops_recorded')}, compilations {stats.get('compilations')}")
    if pr is not None:
        st = pstats.Stats(pr)
        st.sort_stats(os.environ.get("SORT", "tottime"))
        st.print_stats(os.environ.get("FILT", ""), int(os.environ.get("N", "35")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
