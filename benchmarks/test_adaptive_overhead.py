"""Host (wall-clock) cost per op of adaptive eager: recording and replay, next to eager
on the device and plain CPU PyTorch (``make bench-host``).

A benchmark, not a test: wall time depends on the machine and its load. The program is
a chain of ``OPS`` small elementwise ops ending in a host read (a region boundary), run
four ways: plain CPU; eager on ``neuron``; under adaptive eager while it only *records*
(modeled compile latency on, so no region is ready within the benchmark); and under
adaptive eager while it *replays* (compile latency zero, warmed up until replays
happen). Each benchmark checks that it measured what it says (replays or none) and
reports µs per op in ``extra_info``. Adaptive eager is reached through
``torchneuron.bench._runtime``, the bench's one module for it; when it cannot be
imported, the adaptive cases are skipped with the import's own error.
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCHNEURON_COMPILE_LATENCY", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

import torchneuron  # noqa: E402, F401
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
    latency = mode == "adaptive_recording"  # modeled latency keeps regions compiling
    if mode.startswith("adaptive"):
        _adaptive_or_skip()
    with settings.override(compile_latency=latency):
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
