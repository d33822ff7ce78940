"""Host (wall-clock) cost of adaptive eager: per training step recording vs replaying, next to
eager on the device and plain CPU PyTorch, and the main thread's stall while a transformer
step compiles in the background.

Benchmarks, not tests: wall time depends on the machine and its load. ``make bench``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCHNEURON_COMPILE_LATENCY", "0")

import copy  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torchneuron.adaptive_eager as ae  # noqa: E402

_OPS_PER_STEP = 41  # aten ops of one MLP training step (forward, backward, SGD)


def _mlp_step(device: str):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(8, 16).to(device), torch.randn(8, 4).to(device)

    def step() -> float:
        loss = F.mse_loss(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


@pytest.mark.parametrize("mode", ["cpu", "eager", "recording", "replaying"])
def test_mlp_step_wall_time(benchmark, mode: str) -> None:  # noqa: ANN001
    """One MLP training step; divide by ~41 ops for the per-op figure."""
    ae.reset()
    step = _mlp_step("cpu" if mode == "cpu" else "neuron")
    if mode == "recording":
        ae.enable()
        from torchneuron.hardware import settings

        with settings.override(ae_hot_threshold=10**9):  # never hot: always recording
            benchmark(step)
    elif mode == "replaying":
        ae.enable()
        for _ in range(4):
            step()
        assert ae.stats()["replays"] >= 1, ae.explain()
        benchmark(step)
    else:
        benchmark(step)
    benchmark.extra_info["ops_per_step"] = _OPS_PER_STEP
    ae.disable()
    ae.reset()


def test_transformer_compile_stall(benchmark) -> None:  # noqa: ANN001
    """Wall seconds the main thread waits for a transformer step's background compile at
    swap-in (with compile latency zeroed, the executable is wanted at the next step)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True)

    def run() -> float:
        ae.reset()
        m = copy.deepcopy(layer).to("neuron")
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        x = torch.randn(4, 8, 32).to("neuron")
        with ae.enabled():
            for _ in range(4):
                loss = m(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                loss.item()
        return ae.stats()["compile_wall_stall_s"]

    stall = benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info["compile_wall_stall_s"] = stall
