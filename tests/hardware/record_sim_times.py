"""Record the simulated step times of the zoo's training loops (``tests/loops.py``).

Why: the simulator's own wall-clock speed is worth optimizing only if what it simulates
stays exactly the same. This measures, in integer nanoseconds of the simulated clock,
every step of every loop (eager on the device and under ``torch.compile``, with modeled
compile latency on and off) plus the core's time breakdown, and
``tests/hardware/test_sim_times.py`` asserts that today's code reproduces the recorded
values to the nanosecond.

Regenerate the file only when simulated time is *meant* to change (a cost-model or
profile change), and say so in the commit::

    PYTHONPATH=$PWD python tests/hardware/record_sim_times.py        # rewrites sim_times.json
    PYTHONPATH=$PWD python tests/hardware/record_sim_times.py --check  # compares, writes nothing
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import torch  # noqa: E402

import torchneuron  # noqa: E402, F401
from tests import loops  # noqa: E402
from torchneuron.hardware import core as hw_core  # noqa: E402
from torchneuron.hardware import settings  # noqa: E402

__all__ = ["CASES", "PATH", "STEPS", "measure", "measure_all"]

PATH = Path(__file__).with_name("sim_times.json")
STEPS = 3
CASES = [
    (name, mode, latency)
    for latency in (False, True)
    for mode in ("eager", "compiled")
    for name in loops.LOOPS
]
_BREAKDOWN = (
    "host_ns", "host_ns_by_category", "host_wait_ns", "device_free_ns", "device_busy_ns",
    "device_idle_ns", "enqueued", "kernel_launches", "eager_compiles",
    "executable_launches", "executable_kernels", "peak_memory",
)  # fmt: skip


def key(name: str, mode: str, latency: bool) -> str:
    return f"{name}/{mode}/latency={'on' if latency else 'off'}"


def measure(name: str, mode: str, latency: bool, steps: int = STEPS) -> dict[str, Any]:
    """Simulated ns of each step of loop ``name`` in ``mode`` on a fresh core 0.

    Each step ends with ``synchronize()``, so a step's time is host time from the end
    of the previous one: dispatch, launches, compiles and waiting for the device.
    """
    torch._dynamo.reset()  # compiled graphs of an earlier case would be reused
    hw_core.reset()
    # The compile cache off: a graph compiled by an earlier case must cost its compile here.
    with settings.override(compile_latency=latency, cache=False):
        torch.manual_seed(0)
        loop = loops.make_loop(name, mode)
        core = hw_core.get_core(0)
        start = core.synchronize()
        times = []
        for _ in range(steps):
            loop.step()
            end = core.synchronize()
            times.append(end - start)
            start = end
        stats = core.stats()
    hw_core.reset()
    return {"step_ns": times, **{k: stats[k] for k in _BREAKDOWN}}


def measure_all() -> dict[str, Any]:
    return {key(*case): measure(*case) for case in CASES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the file only")
    args = parser.parse_args(argv)
    got = measure_all()
    if args.check:
        want = json.loads(PATH.read_text())
        bad = [k for k in want if want[k] != got.get(k)]
        for k in bad:
            print(f"differs: {k}\n  recorded {want[k]}\n  now      {got.get(k)}")
        print("identical" if not bad else f"{len(bad)} case(s) differ")
        return 1 if bad else 0
    PATH.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    print(f"wrote {PATH} ({len(got)} cases)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
