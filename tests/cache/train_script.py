"""A torch.compile training script, run as its own process by the cache tests and benchmarks.

``python train_script.py [STEPS] [MODEL]``: MODEL is ``tiny_mlp`` (default, fast) or a
name from ``tests/models.py``. Prints one JSON line: per-step losses, simulated step
times (ns), host wall-clock seconds since the process started after each step, the
compiler's stats and the cache's counts. Run twice with one TORCHNEURON_CACHE_DIR, the
second process must compile nothing and give identical numbers.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

import torchneuron  # noqa: E402, F401
from torchneuron import cache, compiler  # noqa: E402


def _model(name: str) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, object]:
    if name == "tiny_mlp":
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 4))
        return model, torch.randn(6, 8), torch.randn(6, 4), torch.nn.functional.mse_loss
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests import models

    x, y = models.batch(name)
    return models.build(name), x, y, lambda out, t: models.loss(name, out, t)


def main(steps: int, name: str) -> None:
    model, x, y, loss_fn = _model(name)
    model = model.to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(model, backend="neuron")
    x, y = x.to("neuron"), y.to("neuron")
    losses, times, wall = [], [], []
    for _ in range(steps):
        start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        start.record()
        loss = loss_fn(step(x), y)  # type: ignore[operator]
        loss.backward()
        opt.step()
        opt.zero_grad()
        end.record()
        end.synchronize()
        losses.append(loss.item())
        times.append(round(start.elapsed_time(end) * 1e6))
        wall.append(time.perf_counter() - _T0)
    s = compiler.stats()
    out = {"losses": losses, "times_ns": times, "wall_s": wall,
           "compilations": s["compilations"], "cache": s["cache"],
           "store": cache.stats().get("process", {}),
           "weights": [p.detach().cpu().flatten().tolist() for p in model.parameters()]}
    print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3,
         sys.argv[2] if len(sys.argv) > 2 else "tiny_mlp")
