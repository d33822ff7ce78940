"""Host (wall-clock) overhead per eager op on the neuron device.

Why a benchmark and not a test: wall time depends on the machine and its load, so
it is measured and reported (``make bench``), never asserted. Simulated time is
the tests' business; this measures what the Python dispatch path
(``__torch_dispatch__`` -> unwrap -> CPU kernel -> cost model -> wrap) costs the
host, next to the same op on plain CPU tensors, so the per-op overhead is the
difference between the two.
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCHNEURON_COMPILE_LATENCY", "0")

from collections.abc import Callable  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import torchneuron  # noqa: E402, F401

OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add,
    "mul_": lambda a, b: a.mul_(1.0),
    "mm": torch.mm,
    "relu": lambda a, b: torch.relu(a),
    "view": lambda a, b: a.view(-1),
    "sum": lambda a, b: a.sum(),
}


@pytest.mark.parametrize("device", ["cpu", "neuron"])
@pytest.mark.parametrize("op", list(OPS))
def test_eager_op_wall_time(benchmark, op: str, device: str) -> None:  # noqa: ANN001
    """One small (8x8) op: on CPU it is the kernel; on neuron, kernel + dispatch overhead."""
    a = torch.randn(8, 8, device=device)
    b = torch.randn(8, 8, device=device)
    f = OPS[op]
    benchmark.group = op
    benchmark(f, a, b)


def test_small_training_step_wall_time(benchmark) -> None:  # noqa: ANN001
    """A whole small MLP training step (~30 ops) on the device."""
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    model = model.to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 32, device="neuron")
    y = torch.randint(0, 10, (8,), device="neuron")

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    benchmark(step)
