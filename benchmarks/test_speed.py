"""The simulator's own wall-clock speed on the zoo's training loops (issue 11).

A benchmark, not a test: wall time depends on the machine and its load, so it is
measured and printed (``make bench-speed``), never asserted. For each loop of
``tests/loops.py`` it times one training step (median of ``ROUNDS``) on plain CPU
PyTorch, eagerly on the device, under ``torch.compile(backend="neuron")`` and, once
``torchneuron.adaptive_eager`` exists, under adaptive eager; then it prints one table
with the wall µs per aten op (step time / aten ops the step dispatches, counted by a
dispatch mode in an untimed step) of CPU and eager side by side, and the ms per step
of every mode. Adaptive eager is warmed up until a step replays without recording (its
steady state), and the table says how many replays and recorded ops the timed rounds
had, so its column is the replay cost whenever steady state is reached. The simulated times of the same loops are pinned by
``tests/hardware/test_sim_times.py``.

On a loaded machine wall medians swing by 2x between runs; ``make bench-speed
BENCH_SPEED_ARGS=--benchmark-timer=time.process_time`` times this process's CPU time
instead (the table's figures are then CPU µs/ms), which is far steadier.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("TORCHNEURON_COMPILE_LATENCY", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import torchneuron  # noqa: E402, F401
from tests import loops  # noqa: E402

# One intra-op thread: the kernels are tiny, and on a shared machine a second thread
# only adds scheduling noise; CPU and neuron both run the same CPU kernels under it.
torch.set_num_threads(1)

# Compiles happen here (and eager signatures are first seen); then a few more steps,
# because a compiled step runs each of its interpreter's step callables (and Dynamo's and
# AOTAutograd's wrappers) once, and CPython specializes a function's bytecode only after
# several calls: measured on the CNN loop, compiled steps 2-7 run 10-50% above their
# steady state (eager's code paths run dozens of times per step and warm up in one).
WARMUP = 10
# adaptive eager: warm up until a step replays without recording (steady state), at most
ADAPTIVE_WARMUP = 30
ROUNDS = 15
MODES = ("cpu", "eager", "compiled", "adaptive")

_step_s: dict[tuple[str, str], float] = {}
_ops: dict[tuple[str, str], int] = {}
_steady: dict[str, str] = {}  # loop -> what adaptive eager did during the timed rounds


class _CountOps(TorchDispatchMode):
    """Counts the aten ops a step dispatches (after autograd), on any device."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.n += 1
        return func(*args, **(kwargs or {}))


def _adaptive() -> object | None:
    try:
        import torchneuron.adaptive_eager as ae
    except ImportError:
        return None
    return ae if hasattr(ae, "enable") and hasattr(ae, "disable") else None


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    if not _step_s:
        return
    lines = [
        "",
        "wall time per aten op (µs): eager on neuron vs plain CPU PyTorch, same loop",
        f"{'loop':<16}{'ops/step':>9}{'cpu':>9}{'neuron':>9}{'ratio':>8}",
    ]
    for name in loops.LOOPS:
        cpu, dev = _step_s.get((name, "cpu")), _step_s.get((name, "eager"))
        n = _ops.get((name, "eager")) or _ops.get((name, "cpu"))
        if cpu is None or dev is None or not n:
            continue
        c_us, d_us = cpu / _ops.get((name, "cpu"), n) * 1e6, dev / n * 1e6
        lines.append(f"{name:<16}{n:>9}{c_us:>9.1f}{d_us:>9.1f}{d_us / c_us:>7.1f}x")
    lines += ["", "wall time per training step (ms, median of "
              f"{ROUNDS}); ratios to eager on neuron",
              f"{'loop':<16}" + "".join(f"{m:>11}" for m in MODES)]  # fmt: skip
    for name in loops.LOOPS:
        row = f"{name:<16}"
        for mode in MODES:
            s = _step_s.get((name, mode))
            row += f"{'-':>11}" if s is None else f"{s * 1e3:>11.2f}"
        lines.append(row)
        eager = _step_s.get((name, "eager"))
        if eager:
            ratios = [
                "-" if _step_s.get((name, m)) is None else f"{_step_s[(name, m)] / eager:.2f}x"
                for m in MODES
            ]
            lines.append(f"{'':<16}" + "".join(f"{r:>11}" for r in ratios))
    if _steady:
        lines += ["", "adaptive eager during the timed rounds (per round: replays, ops recorded)"]
        lines += [f"{name:<16}{_steady[name]}" for name in loops.LOOPS if name in _steady]
    print("\n".join(lines))


def _warm_up_to_replay(ae: object, step: object) -> int | None:
    """Step until one step replays and records nothing (at most ``ADAPTIVE_WARMUP``);
    returns how many steps that took (None: never)."""
    for n in range(1, ADAPTIVE_WARMUP + 1):
        before = ae.stats()  # type: ignore[attr-defined]
        step()  # type: ignore[operator]
        after = ae.stats()  # type: ignore[attr-defined]
        if after["replays"] > before["replays"] and after["ops_recorded"] == before["ops_recorded"]:
            return n
    return None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", loops.LOOPS)
def test_training_step_wall_time(benchmark, name: str, mode: str) -> None:  # noqa: ANN001
    """One training step of ``name`` in ``mode``; also counts its aten ops."""
    ae = None
    if mode == "adaptive":
        ae = _adaptive()
        if ae is None:
            pytest.skip("torchneuron.adaptive_eager (enable/disable) does not exist yet")
    torch._dynamo.reset()
    torch.manual_seed(0)
    loop = loops.make_loop(name, "eager" if mode == "adaptive" else mode)
    if ae is not None:
        ae.enable()
    try:
        for _ in range(WARMUP):
            loop.step()
        if ae is not None:
            warm = _warm_up_to_replay(ae, loop.step)
        if mode in ("cpu", "eager"):
            with _CountOps() as counter:
                loop.step()
            _ops[(name, mode)] = counter.n
        benchmark.group = f"step: {name}"
        benchmark.extra_info["ops_per_step"] = _ops.get((name, mode))
        before = ae.stats() if ae is not None else None
        benchmark.pedantic(loop.step, rounds=ROUNDS, iterations=1, warmup_rounds=0)
        if ae is not None:
            after = ae.stats()
            rp = (after["replays"] - before["replays"]) / ROUNDS
            rec = (after["ops_recorded"] - before["ops_recorded"]) / ROUNDS
            reached = (f"first steady step: {WARMUP + warm}" if warm is not None
                       else f"no steady step in {WARMUP + ADAPTIVE_WARMUP} warm-up steps")
            _steady[name] = f"{rp:.2f} replays, {rec:.0f} ops recorded ({reached})"
    finally:
        if ae is not None:
            ae.disable()
    _step_s[(name, mode)] = statistics.median(benchmark.stats.stats.data)
