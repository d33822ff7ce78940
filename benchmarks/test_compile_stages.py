"""Compile time per stage for the small transformer's training graph (wall clock).

A benchmark, not a test: it measures how long prepare, the Torch-MLIR import, the
StableHLO parse and the neuron compiler take on this machine (``make bench``), and
prints the split from ``torchneuron.compiler.stats()``. The training graph is the
forward+backward of ``tests.models.TinyLM`` traced with ``torch.func``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TORCHNEURON_COMPILE_LATENCY", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.func import functional_call, grad_and_value  # noqa: E402

import torchneuron.compiler as tc  # noqa: E402
from tests import models  # noqa: E402
from torchneuron.compiler.lower.worker import warm_up  # noqa: E402


def _training_graph() -> tuple:
    model = models.build("tiny_lm")
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = models.batch("tiny_lm")

    def step(p: dict, x: torch.Tensor, y: torch.Tensor) -> tuple:
        def loss(p: dict) -> torch.Tensor:
            return models.loss("tiny_lm", functional_call(model, p, (x,)), y)

        grads, value = grad_and_value(loss)(p)
        return value, grads

    names = list(params)

    def flat(*args: torch.Tensor) -> tuple:
        p = dict(zip(names, args[:-2], strict=True))
        value, grads = step(p, args[-2], args[-1])
        return (value, *[grads[n] for n in names])

    return flat, [*params.values(), x, y]


@pytest.mark.benchmark(group="compile")
def test_transformer_training_graph_compile(benchmark: pytest.FixtureRequest) -> None:
    fn, inputs = _training_graph()
    warm_up()
    tc.reset_stats()
    exe = benchmark.pedantic(lambda: tc.compile_graph(fn, inputs, name="tiny_lm_train"),
                             rounds=3, iterations=1)
    stats = tc.stats()
    print("\ncompile seconds by stage (sum of 3 rounds):", stats["compile_seconds_by_stage"])
    print(f"{exe.signature['num_stablehlo_ops']} StableHLO ops -> {exe.num_kernels} kernels, "
          f"{exe.device_ns} ns on device")
    assert stats["failures"] == 0
