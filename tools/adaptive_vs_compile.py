"""Steady-state simulated time per training step: eager vs adaptive eager vs torch.compile.

    PYTHONPATH=. TORCHNEURON_COMPILE_LATENCY=0 python tools/adaptive_vs_compile.py [--steps N]
    PYTHONPATH=. python tools/adaptive_vs_compile.py --latency-run mlp --steps 3000

Each loop calls ``loss.item()`` every step. Steady state is the median simulated host time
of the last 3 steps. ``--latency-run`` runs one model under adaptive eager with the
default compile-latency model and prints the step and simulated time of the first replay.
``--layers`` compares the modeled compile latency spent before steady state for the
transformer with 2 and 8 identical layers.
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch
import torch.nn.functional as F

import torchneuron
import torchneuron.adaptive_eager as ae
from torchneuron.hardware import get_core, program_compile_latency_ns


class LM(torch.nn.Module):
    def __init__(self, layers: int = 1, d: int = 32) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(64, d)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(d, 2, 2 * d, dropout=0.1, batch_first=True)
            for _ in range(layers))
        self.head = torch.nn.Linear(d, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def build(name: str, layers: int = 1) -> tuple[torch.nn.Module, type, dict, callable]:
    torch.manual_seed(0)
    if name == "mlp":
        m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        return m, torch.optim.SGD, {"lr": 0.1}, lambda g: (
            torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g))
    if name == "cnn":
        m = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10))
        return m, torch.optim.SGD, {"lr": 0.05}, lambda g: (
            torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g))
    m = LM(layers)
    return m, torch.optim.AdamW, {"lr": 1e-3}, lambda g: (
        torch.randint(0, 64, (4, 16), generator=g), torch.randint(0, 64, (4, 16), generator=g))


def run(name: str, mode: str, steps: int, layers: int = 1) -> tuple[list[int], list[int]]:
    """Per-step simulated host ns, and the steps that replayed (adaptive)."""
    model, opt_cls, kw, data = build(name, layers)
    torchneuron.reset()  # adaptive eager's regions, counters, fresh cores
    m = copy.deepcopy(model).to("neuron")
    fwd = torch.compile(m, backend="neuron") if mode == "compile" else m
    opt = opt_cls(m.parameters(), **kw)
    g = torch.Generator().manual_seed(1)
    core = get_core(0)
    times, replayed = [], []
    if mode == "adaptive":
        ae.enable()
    try:
        for step in range(steps):
            x, y = data(g)
            t0, r0 = core.now, ae.stats()["replays"]
            out = fwd(x.to("neuron"))
            loss = F.cross_entropy(out.flatten(0, -2) if out.dim() > 2 else out, y.to("neuron").flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
            times.append(core.now - t0)
            if ae.stats()["replays"] > r0:
                replayed.append(step)
    finally:
        ae.disable()
    torch._dynamo.reset()
    return times, replayed


def steady(times: list[int]) -> int:
    return int(statistics.median(times[-3:]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--models", default="mlp,transformer,cnn")
    ap.add_argument("--latency-run", default=None)
    ap.add_argument("--layers", action="store_true")
    a = ap.parse_args()
    if a.latency_run:
        times, replayed = run(a.latency_run, "adaptive", a.steps)
        first = replayed[0] if replayed else None
        at = sum(times[:first]) if first is not None else None
        print(f"{a.latency_run}: first replay at step {first}, simulated {at} ns; "
              f"steady {steady(times)} ns/step; main-thread wall stall waiting for "
              f"compiles {ae.stats()['compile_wall_stall_s']:.3f} s")
        print(ae.explain())
        return
    if a.layers:
        spent = {}
        for n in (2, 8):
            run("transformer", "adaptive", a.steps, layers=n)
            profile = get_core(0).profile  # the default latency model, even if zeroed
            spent[n] = sum(program_compile_latency_ns(profile, len(r), True)
                           for r in ae.regions() if r.executable is not None)
            print(f"transformer {n} layers: modeled compile latency of swapped-in regions "
                  f"{spent[n]} ns")
        print(f"ratio 8/2 layers: {spent[8] / max(1, spent[2]):.2f}")
        return
    for name in a.models.split(","):
        row = {mode: run(name, mode, a.steps) for mode in ("eager", "adaptive", "compile")}
        s = {mode: steady(t) for mode, (t, _) in row.items()}
        print(f"{name}: steady ns/step eager {s['eager']}, adaptive {s['adaptive']}, "
              f"compile {s['compile']}; adaptive/compile {s['adaptive'] / s['compile']:.3f}, "
              f"eager/adaptive {s['eager'] / s['adaptive']:.2f}; replayed steps "
              f"{row['adaptive'][1]}")


if __name__ == "__main__":
    main()
