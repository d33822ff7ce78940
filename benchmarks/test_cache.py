"""The compile cache: load from disk against compiling, and a warm process against a cold one.

Benchmarks, not tests (``make bench``):

- ``test_load_from_disk_vs_compile``: the small CNN's inference graph compiled in
  full (prepare, the Torch-MLIR worker, neuronc) against loaded through its graph key
  from a fresh on-disk store (no in-memory tier), host wall clock; each load checks the
  entry's content as a new process would (``executable.check_entry``: one neuronc run).
- ``test_second_process_time_to_steady_state``: ``tests/cache/train_script.py`` on the
  tiny transformer, run in a cold process and then a warm one sharing a cache folder,
  with modeled compile latency on. Prints each process's simulated time and host
  wall-clock time until the end of its first steady step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

os.environ.setdefault("TORCHNEURON_COMPILE_LATENCY", "0")
_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))

import pytest  # noqa: E402
import torch  # noqa: E402

import torchneuron.compiler as tc  # noqa: E402
from tests import models  # noqa: E402
from torchneuron.cache import CacheStore  # noqa: E402
from torchneuron.compiler import executable  # noqa: E402
from torchneuron.compiler.lower.worker import warm_up  # noqa: E402


def _inference_graph() -> tuple:
    model = models.build("cnn").eval()
    x, _ = models.batch("cnn")
    return (lambda inp: model(inp)), [x]


@pytest.mark.benchmark(group="cache")
def test_load_from_disk_vs_compile(benchmark: pytest.FixtureRequest) -> None:
    fn, inputs = _inference_graph()
    warm_up()
    root = Path(tempfile.mkdtemp(prefix="torchneuron-bench-cache-"))
    compile_s = []
    for _ in range(3):
        t = time.perf_counter()
        tc.compile_graph(fn, inputs, name="cnn")
        compile_s.append(time.perf_counter() - t)
    tc.compile_graph(fn, inputs, store=CacheStore(root), graph_key="cnn")

    def load() -> tc.Executable:
        executable._TRUSTED.clear()  # as a new process: the entry's content is checked again
        return tc.compile_graph(fn, inputs, store=CacheStore(root, memory_bytes=0),
                                graph_key="cnn")

    exe = benchmark.pedantic(load, rounds=20, iterations=1)
    assert exe.from_cache
    load_s = benchmark.stats.stats.median
    print(f"\ncompile (median of 3): {median(compile_s) * 1e3:.1f} ms; load from disk "
          f"(median of 20): {load_s * 1e3:.2f} ms; ratio {median(compile_s) / load_s:.0f}x; "
          f"entry {len(exe.to_bytes())} bytes")
    torch.testing.assert_close(exe.run(list(inputs))[0], fn(*inputs), rtol=1e-4, atol=1e-4)


def _run(cache_dir: str, steps: int) -> dict:
    env = {**os.environ, "TORCHNEURON_CACHE_DIR": cache_dir, "TORCHNEURON_COMPILE_LATENCY": "1",
           "PYTHONPATH": str(_ROOT)}
    out = subprocess.run([sys.executable, str(_ROOT / "tests/cache/train_script.py"),
                          str(steps), "tiny_lm"], env=env, capture_output=True, text=True,
                         timeout=900, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _to_steady(run: dict) -> tuple[int, float, int]:
    """(simulated ns, wall s) until the end of the first step at steady-state time."""
    steady = run["times_ns"][-1]
    k = next(i for i, t in enumerate(run["times_ns"]) if t == steady)
    return sum(run["times_ns"][: k + 1]), run["wall_s"][k], k + 1


@pytest.mark.benchmark(group="cache")
def test_second_process_time_to_steady_state(benchmark: pytest.FixtureRequest) -> None:
    runs: dict[str, dict] = {}

    def cold() -> tuple[tuple, dict]:
        d = tempfile.mkdtemp(prefix="torchneuron-bench-cache-")
        runs["cold"] = _run(d, 4)
        return (d,), {}

    def warm(d: str) -> None:
        runs["warm"] = _run(d, 4)

    benchmark.pedantic(warm, setup=cold, rounds=1, iterations=1)
    for name in ("cold", "warm"):
        sim, wall, steps = _to_steady(runs[name])
        r = runs[name]
        print(f"\n{name}: {steps} steps to steady state, simulated {sim} ns, wall {wall:.2f} s; "
              f"steady step {r['times_ns'][-1]} ns; compilations {r['compilations']}, "
              f"cache {r['cache']}")
    assert runs["warm"]["compilations"] == 0
    assert runs["warm"]["times_ns"][1:] == runs["cold"]["times_ns"][1:]
    assert runs["warm"]["losses"] == runs["cold"]["losses"]
