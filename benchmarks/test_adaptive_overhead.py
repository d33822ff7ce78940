"""Host (wall-clock) cost per op of adaptive eager: recording and replay, next to eager
on the device and plain CPU PyTorch (``make bench-host``).

A benchmark, not a test: wall time depends on the machine and its load. The program is
a chain of ``OPS`` small elementwise ops ending in a host read (a region boundary), run
four ways: plain CPU; eager on ``neuron``; under adaptive eager while it only *records*
(the hotness threshold out of reach, so nothing is compiled, nor served by the compile
cache); and under adaptive eager while it *replays* (compile latency zero, warmed up
until replays happen). Each benchmark checks that it measured what it says (replays or
none) and reports µs per op in ``extra_info``.

``test_step_replay_vs_eager`` times whole training steps of the zoo's loops
(``tests/loops.py``) ending in ``loss.item()`` (so a step is one region), eagerly and
under adaptive eager after warm-up, and prints one table: the per-step ratio issue 8
asks to stay at or below 1.00x, and the share of timed steps that replayed (a loop
whose region does not replay is measured recording). Adaptive eager is reached through
``torchneuron.bench._runtime``, the bench's one module for it; when it cannot be
imported, the adaptive cases are skipped with the import's own error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TORCHNEURON_COMPILE_LATENCY", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest  # noqa: E402
import torch  # noqa: E402

import torchneuron  # noqa: E402, F401
from tests import loops  # noqa: E402
from torchneuron import hardware  # noqa: E402
from torchneuron.bench import _runtime  # noqa: E402
from torchneuron.hardware import settings  # noqa: E402

OPS = 32  # ops per region: 16 x (mul, add_)
WARMUP = 12
ROUNDS = 20


def _chain(x: torch.Tensor) -> float:
    # distinct scalars: no shorter period, so the region is the whole chain (one that pays)
    for i in range(OPS // 2):
        x = (x * (1.0 + 1e-4 * i)).add_(0.5 + i)
    return x[0, 0].item()  # read back: the region ends here


def _adaptive_or_skip() -> None:
    try:
        _runtime.adaptive_module()
    except ImportError as e:
        pytest.skip(f"adaptive eager not available: {type(e).__name__}: {e}")


@pytest.mark.parametrize("mode", ["cpu", "eager", "adaptive_recording", "adaptive_replay"])
def test_wall_time_per_op(benchmark, mode: str) -> None:  # noqa: ANN001
    benchmark.group = "adaptive eager host cost per op"
    device = "cpu" if mode == "cpu" else "neuron"
    hardware.reset()  # a fresh core: no compiles queued by an earlier benchmark
    x = torch.randn(8, 8, device=device)
    # recording: never hot, so nothing is compiled or served by the compile cache
    recording = {"ae_hot_threshold": 10**9} if mode == "adaptive_recording" else {}
    if mode.startswith("adaptive"):
        _adaptive_or_skip()
    with settings.override(compile_latency=False, **recording):
        if not mode.startswith("adaptive"):
            benchmark.pedantic(_chain, args=(x,), rounds=ROUNDS, warmup_rounds=WARMUP)
            benchmark.extra_info["us_per_op"] = benchmark.stats.stats.median * 1e6 / OPS
            return
        with _runtime.adaptive_scope():
            for _ in range(WARMUP):
                _chain(x)
            before, _ = _runtime.adaptive_summary()
            benchmark.pedantic(_chain, args=(x,), rounds=ROUNDS)
            after, _ = _runtime.adaptive_summary()
    assert before is not None and after is not None
    replays = after["replays"] - before["replays"]
    if mode == "adaptive_replay":
        assert replays >= ROUNDS - 1, f"expected replays, stats: {after}"
    else:
        assert replays == 0, f"expected recording only, stats: {after}"
    benchmark.extra_info["replays"] = replays
    benchmark.extra_info["us_per_op"] = benchmark.stats.stats.median * 1e6 / OPS


# --- per training step: replay against eager on the device (issue 8's acceptance) -------
_step_s: dict[tuple[str, str], float] = {}
_replayed: dict[str, float] = {}


@pytest.fixture(scope="module")
def _step_table():  # noqa: ANN202
    yield
    if not _step_s:
        return
    lines = ["", "wall time per training step with a .item() per step (ms, median): adaptive "
             "eager after warm-up vs eager on the device", f"{'loop':<16}{'eager':>9}"
             f"{'adaptive':>10}{'ratio':>8}{'replayed':>10}"]
    for name in loops.LOOPS:
        e, a = _step_s.get((name, "eager")), _step_s.get((name, "adaptive"))
        if e is None or a is None:
            continue
        lines.append(f"{name:<16}{e * 1e3:>9.2f}{a * 1e3:>10.2f}{a / e:>7.2f}x"
                     f"{_replayed.get(name, 0.0):>9.0%}")
    print("\n".join(lines))


@pytest.mark.parametrize("mode", ["eager", "adaptive"])
@pytest.mark.parametrize("name", loops.LOOPS)
def test_step_replay_vs_eager(benchmark, _step_table, name: str, mode: str) -> None:  # noqa: ANN001
    """One training step of a zoo loop (``tests/loops.py``) ending in ``loss.item()``, so a
    step is a region: eager on the device, or adaptive eager once warmed up (replaying,
    when its region replays; ``replayed`` says for what share of the timed steps)."""
    torch.manual_seed(0)
    hardware.reset()
    loop = loops.make_loop(name, "eager")

    def step() -> float:
        return loop.step().item()

    benchmark.group = "adaptive eager: step replay vs eager"
    if mode == "eager":
        benchmark.pedantic(step, rounds=ROUNDS, warmup_rounds=3)
    else:
        _adaptive_or_skip()
        with _runtime.adaptive_scope():
            for _ in range(6):
                step()
            before, _ = _runtime.adaptive_summary()
            benchmark.pedantic(step, rounds=ROUNDS)
            after, _ = _runtime.adaptive_summary()
        assert before is not None and after is not None
        _replayed[name] = (after["replays"] - before["replays"]) / ROUNDS
        benchmark.extra_info["replayed"] = _replayed[name]
    _step_s[(name, mode)] = benchmark.stats.stats.median
