"""Training and inference scripts a new user writes, unmodified, under adaptive eager:
eager's numbers on the device, and replays where the loop repeats."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import assert_same, clone_to, run, state


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 5))


def test_validation_under_inference_mode_after_each_step() -> None:
    """Under ``torch.inference_mode()``, slicing a tensor made outside it (the batch)
    gives a normal tensor; a replay's deferred slice must too (it raised "Cannot set
    version_counter for inference tensor")."""
    model = _net()

    def loop(device: str) -> dict:
        m = clone_to(model, device)
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(1)
        losses, vals = [], []
        for _ in range(8):
            batch = torch.randn(8, 17, generator=g).to(device)
            loss = F.mse_loss(m(batch[:, :16]).sum(1), batch[:, 16])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            with torch.inference_mode():
                v = F.mse_loss(m(batch[:, :16]).sum(1), batch[:, 16])
                vals.append(v.item())
        return {"losses": torch.tensor(losses), "vals": torch.tensor(vals), **state(m)}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    assert_same(eager, adaptive)
    assert ae.stats()["replays"] > 0, ae.explain()
