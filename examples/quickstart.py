"""Quickstart: train a small model on the (simulated) neuron device.

Run with ``make demo``. The script moves a model and its data to ``"neuron"`` as
one would to ``"cuda"``, trains it with AdamW, and prints per step the
*simulated* device time (``torch.neuron.Event``, a pure function of the op
stream: identical on every run and machine) next to the host's wall time. It
asserts what it shows: the loss goes down and the neuron run matches the same
training on plain CPU PyTorch.
"""

from __future__ import annotations

import copy
import time

import torch
import torch.nn.functional as F
from torch import nn

import torchneuron

STEPS = 8


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(),
                         nn.Linear(128, 10))


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 64, generator=g)
    w = torch.randn(64, 10, generator=g)
    return x, (x @ w).argmax(dim=1)  # a learnable labelling


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device: str) -> list[float]:
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(STEPS):
        start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        wall = time.perf_counter()
        start.record()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        end.record()
        value = loss.item()  # a read: the host waits for the device
        wall_ms = (time.perf_counter() - wall) * 1e3
        losses.append(value)
        if device == "neuron":
            print(f"step {step}: loss {value:.4f}   simulated {start.elapsed_time(end):8.3f} ms"
                  f"   wall {wall_ms:7.1f} ms")
    return losses


def main() -> None:
    print(f"torchneuron {torchneuron.__version__} on {torchneuron.current_profile().name}, "
          f"device {torch.accelerator.current_accelerator()}, "
          f"{torch.neuron.device_count()} NeuronCores")
    model, (x, y) = make_model(), make_data()
    reference = train(copy.deepcopy(model), x, y, "cpu")
    losses = train(model, x, y, "neuron")
    p = torchneuron.current_profile()
    print(f"(step 0 includes {p.eager_compile_ns / 1e9:.2f} s of modeled eager compile per new op "
          f"signature; TORCHNEURON_COMPILE_LATENCY=0 zeroes it)")
    print(f"memory allocated: {torch.neuron.memory_allocated() / 2**10:.1f} KiB, "
          f"peak {torch.neuron.max_memory_allocated() / 2**10:.1f} KiB")
    print(f"ops executed on the device: {sum(torchneuron.executed_ops().values())}, "
          f"host fallbacks: {sum(torchneuron.fallback_ops().values())}")
    assert losses[-1] < losses[0], "the loss should go down"
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(reference), rtol=1e-5, atol=1e-6)
    print("losses match CPU PyTorch")


if __name__ == "__main__":
    main()
