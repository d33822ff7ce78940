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


def test_amp_autocast_with_grad_scaler_replays_around_the_scalers_ops() -> None:
    """GradScaler's ``_amp_update_scale_`` and ``_amp_foreach_non_finite_check_and_unscale_``
    have no lowering: every region holding one failed to compile, so the whole step stayed
    eager. The first failure teaches the runtime to run them between regions."""
    model = _net()

    def loop(device: str) -> dict:
        m = clone_to(model, device)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        scaler = torch.amp.GradScaler(device)
        g = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(12):
            x, y = torch.randn(8, 16, generator=g).to(device), torch.randint(0, 5, (8,), generator=g)
            with torch.autocast(device_type=device, dtype=torch.bfloat16):
                loss = F.cross_entropy(m(x), y.to(device))
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses.append(loss.detach().float())
        return {"losses": torch.stack(losses), "scale": torch.tensor(scaler.get_scale()),
                **state(m)}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    # bfloat16 matmuls in compiled code round like eager's to within a bfloat16 ulp or two
    assert_same(eager, adaptive, rtol=1.6e-2, atol=1e-3, exact=("scale",))
    s = ae.stats()
    assert s["replays"] > 0, ae.explain()
    assert any(k.startswith("aten._amp_update_scale") for k in s["refused_ops"]), s
    assert "runs eagerly between regions" in ae.explain()


def test_sampling_with_multinomial_replays_the_rest_of_the_step() -> None:
    """``multinomial`` drawing from probabilities the region computed cannot be compiled
    exactly (``random-op-with-tensor-values``): it runs between regions once refused,
    with eager's draws, and the projection before it replays."""
    model = _net()

    def loop(device: str) -> dict:
        m = clone_to(model, device)
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(2)).to(device)
        draws = []
        with torch.no_grad():
            for _ in range(10):
                probs = torch.softmax(m(x) / 0.7, -1)
                draws.append(torch.multinomial(probs, 1).cpu())  # the host reads each draw
        return {"draws": torch.cat(draws, 1)}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    assert_same(eager, adaptive, exact=("draws",))
    s = ae.stats()
    assert s["replays"] > 0 and "aten.multinomial.default" in s["refused_ops"], ae.explain()
