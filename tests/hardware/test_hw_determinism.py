"""Simulated time is a pure function of the op stream: same ns here and in a fresh process."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import torch
from torchneuron.hardware import NeuronCore, aten_kernel_work, settings
aten = torch.ops.aten
torch.manual_seed(0)
core = NeuronCore(0)
x = torch.randn(128, 256)
w = torch.randn(256, 256)
with settings.override(compile_latency=True):
    for i in range(5):
        for func, args in [(aten.mm.default, (x, w)), (aten.exp.default, (x,)),
                           (aten.sum.dim_IntList, (x, [1])), (aten.t.default, (w,)),
                           (aten.index_select.default, (x, 0, torch.arange(i + 1)))]:
            out = func(*args)
            sig = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
            core.run_eager_kernel(str(func), sig, aten_kernel_work(func, args, {}, out))
core.synchronize()
s = core.stats()
print(s["host_ns"], s["device_busy_ns"], s["device_idle_ns"], sorted(s["host_ns_by_category"].items()))
"""


def _run_here() -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(SCRIPT, "<determinism>", "exec"), {})
    return buf.getvalue().strip()


def test_same_stream_same_ns_in_process_and_subprocess() -> None:
    first = _run_here()
    assert first == _run_here()
    other = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"},
    ).stdout.strip()
    assert other == first
