"""A torch.compile training script, run as its own process by the cache tests.

Prints one JSON line: per-step losses and simulated step times (ns), the compiler's
stats and the cache's counts. Run twice with one TORCHNEURON_CACHE_DIR, the second
process must compile nothing and give identical numbers.
"""

from __future__ import annotations

import json
import sys

import torch

import torchneuron  # noqa: F401
from torchneuron import cache, compiler


def main(steps: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4)).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(model, backend="neuron")
    x, y = torch.randn(6, 8).to("neuron"), torch.randn(6, 4).to("neuron")
    losses, times = [], []
    for _ in range(steps):
        start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        start.record()
        loss = torch.nn.functional.mse_loss(step(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        end.record()
        end.synchronize()
        losses.append(loss.item())
        times.append(round(start.elapsed_time(end) * 1e6))
    s = compiler.stats()
    out = {"losses": losses, "times_ns": times, "compilations": s["compilations"],
           "cache": s["cache"], "store": cache.stats()["process"],
           "weights": [p.detach().cpu().flatten().tolist() for p in model.parameters()]}
    print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
