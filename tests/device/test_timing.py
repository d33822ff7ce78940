"""Simulated time on the neuron device: events, synchronize, determinism, regimes.

Why: simulated time is the project's measurement. It must be read the way users
read cuda time (``Event.elapsed_time``, ``synchronize``), be a pure function of
the op stream (two processes print the same nanoseconds, whatever their hash
seeds), and land in the right regime: a small eager training step is bound by
per-op host overhead, a large BF16 matmul by TensorE near its roofline. Regimes
are asserted on the cost model's own breakdown (host time by category, device
busy/idle time, per-engine kernel time), never on pasted numbers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests import models
from torchneuron.hardware import (
    KernelWork,
    aten_kernel_work,
    current_profile,
    get_core,
    kernel_cost,
)

ROOT = Path(__file__).resolve().parents[2]


def _event() -> torch.neuron.Event:
    return torch.neuron.Event(enable_timing=True)


def _mlp_step(model: torch.nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
    x, y = models.batch("mlp", seed=seed)
    opt.zero_grad(set_to_none=True)
    models.loss("mlp", model(x.to("neuron")), y.to("neuron")).backward()
    opt.step()


# --- events and synchronize --------------------------------------------------------------------


def test_event_elapsed_time_is_simulated_device_time(fresh_cores: None) -> None:
    core = get_core(0)
    a = torch.randn(512, 512, device="neuron")
    torch.neuron.synchronize()
    start, end = _event(), _event()
    start.record()
    b = a @ a
    end.record()
    end.synchronize()
    work = aten_kernel_work(torch.ops.aten.mm.default, (a.buffer, a.buffer), {}, b.buffer)
    kernel = kernel_cost(work, core.profile).total_ns
    p = core.profile
    # one op: host dispatch + launch, then the kernel runs on the idle device
    assert start.elapsed_time(end) == pytest.approx(
        (p.host_dispatch_ns + p.kernel_launch_ns + kernel) / 1e6, abs=1e-9
    )
    assert core.now == core.timeline.device_free_ns  # end.synchronize() waited for it


def test_synchronize_waits_for_the_device(fresh_cores: None) -> None:
    core = get_core(0)
    a = torch.randn(256, 256, device="neuron")
    for _ in range(3):
        a = a @ a / 256
    assert core.now < core.timeline.device_free_ns, "work is asynchronous until synchronized"
    torch.neuron.synchronize()
    assert core.now == core.timeline.device_free_ns


def test_reading_a_value_synchronizes(fresh_cores: None) -> None:
    core = get_core(0)
    a = torch.randn(256, 256, device="neuron")
    s = (a @ a).sum()
    assert core.now < core.timeline.device_free_ns
    s.item()
    assert core.now >= core.timeline.device_free_ns


def test_event_errors_like_cuda() -> None:
    untimed, timed = torch.neuron.Event(), _event()
    untimed.record()
    timed.record()
    with pytest.raises(RuntimeError, match="enable_timing"):
        untimed.elapsed_time(timed)
    with pytest.raises(RuntimeError, match="recorded"):
        _event().elapsed_time(timed)


# --- determinism --------------------------------------------------------------------------------

_LOOP = """
import sys
sys.path.insert(0, {root!r})
import torch, torchneuron
from tests import models
model = models.build("tiny_lm").to("neuron")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    x, y = models.batch("tiny_lm", seed=step)
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    opt.zero_grad()
    models.loss("tiny_lm", model(x.to("neuron")), y.to("neuron")).backward()
    opt.step()
    end.record()
    end.synchronize()
    print(f"step {{step}}: {{start.elapsed_time(end)!r}} ms simulated")
print("host_ns", torchneuron.hardware.get_core(0).now)
"""


def test_two_processes_print_identical_simulated_step_times() -> None:
    script = _LOOP.format(root=str(ROOT))
    procs = []
    for hash_seed in ("1", "2"):  # hash-order randomness must not leak into simulated time
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, TORCHNEURON_COMPILE_LATENCY="1")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", script], env=env, cwd=ROOT,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
        )
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(out)
    assert outs[0] == outs[1]
    lines = outs[0].splitlines()
    assert len(lines) == 4 and all(float(line.split()[2]) > 0 for line in lines[:3])
    # compile latency is on: the first step pays the eager NEFF compiles, later ones don't
    first, second = (float(line.split()[2]) for line in lines[:2])
    assert first > second


# --- regimes ---------------------------------------------------------------------------------------


def test_small_mlp_step_is_launch_bound(fresh_cores: None) -> None:
    """Eager on small tensors: the device idles while the host dispatches and launches."""
    core = get_core(0)
    model = models.build("mlp").to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _mlp_step(model, opt, 0)  # warm-up (first use of every signature)
    torch.neuron.synchronize()
    before = core.stats()
    start, end = _event(), _event()
    start.record()
    _mlp_step(model, opt, 1)
    end.record()
    end.synchronize()
    after = core.stats()
    step_ns = start.elapsed_time(end) * 1e6
    host = {k: v - before["host_ns_by_category"].get(k, 0)
            for k, v in after["host_ns_by_category"].items()}
    overhead = host.get("dispatch", 0) + host.get("launch", 0)
    busy = after["device_busy_ns"] - before["device_busy_ns"]
    idle = after["device_idle_ns"] - before["device_idle_ns"]
    kernels = after["kernel_launches"] - before["kernel_launches"]
    assert kernels > 10
    assert overhead > 0.9 * step_ns, (host, step_ns)
    assert busy < 0.1 * step_ns and idle > busy


def test_large_bf16_matmul_is_tensor_engine_bound() -> None:
    """A 4096x4096 BF16 matmul: TensorE time near its roofline dominates the eager op.

    The work is taken from the eager path's own mapping (``aten_kernel_work``) on meta
    tensors: the CPU would need minutes to compute a BF16 product of this size.
    """
    n = 4096
    a = torch.empty(n, n, dtype=torch.bfloat16, device="meta")
    work = aten_kernel_work(torch.ops.aten.mm.default, (a, a), {}, a @ a)
    assert work is not None and work.flops == 2 * n**3
    p = current_profile()
    cost = kernel_cost(work, p)
    roofline_ns = work.flops / p.matmul_flops("bf16") * 1e9
    assert cost.bound == "tensor"
    assert roofline_ns <= cost.engine_ns["tensor"] <= 1.05 * roofline_ns
    assert cost.engine_ns["tensor"] > 4 * cost.engine_ns["dma"]
    # as one eager op on a core: host overheads are negligible next to TensorE
    core = type(get_core(0))(0)  # a private core: this clock starts at 0
    start = core.record_event()
    core.run_eager_kernel("mm", ("bf16", n), work)
    end = core.record_event()
    assert cost.engine_ns["tensor"] > 0.95 * (end - start)


def test_same_matmul_in_fp32_is_about_four_times_slower() -> None:
    """The profile's FP32 TensorE rate (DESIGN section 4) shows in the breakdown."""
    p = current_profile()
    bf16 = kernel_cost(KernelWork(matmuls=[(1, 2048, 2048, 2048, "bf16")]), p)
    fp32 = kernel_cost(KernelWork(matmuls=[(1, 2048, 2048, 2048, "f32")]), p)
    assert fp32.engine_ns["tensor"] == pytest.approx(p.fp32_slowdown * bf16.engine_ns["tensor"], rel=0.05)
