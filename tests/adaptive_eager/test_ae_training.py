"""Unmodified training loops under adaptive eager: eager's numbers, steady state early."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import ReplayLog, assert_same, clone_to, run, state

STEPS = 7


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _train(model: torch.nn.Module, make_opt, seed: int, steps: int = STEPS,
           log: ReplayLog | None = None, extra=None, schedule=None):
    """The MLP trained with ``make_opt(params)`` (and ``schedule(opt)`` stepped after each
    step), ``loss.item()`` every step; returns losses, parameters and ``extra(m, opt)``."""
    def loop(device: str) -> dict:
        m = clone_to(model, device)
        opt = make_opt(m.parameters())
        sched = schedule(opt) if schedule is not None else None
        g = torch.Generator().manual_seed(seed)
        losses = []
        for step in range(steps):
            x = torch.randn(8, 16, generator=g).to(device)
            y = torch.randn(8, 4, generator=g).to(device)
            loss = F.mse_loss(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            losses.append(loss.item())
            if log is not None:
                log.mark(step)
        return {"losses": torch.tensor(losses), **state(m),
                **(extra(m, opt) if extra is not None else {})}
    return loop


def _mlp_loop(model: torch.nn.Module, log: ReplayLog | None = None):
    def momentum(m: torch.nn.Module, opt: torch.optim.Optimizer) -> dict:
        return {"momentum": torch.stack([opt.state[p]["momentum_buffer"].cpu().flatten()[:4]
                                         for p in m.parameters()])}
    return _train(model, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 1, log=log,
                  extra=momentum)


def test_mlp_sgd_matches_eager_and_cpu_and_replays_by_step_5() -> None:
    model = _mlp()
    cpu = run(_mlp_loop(model), "cpu")
    eager = run(_mlp_loop(model), "neuron")
    log = ReplayLog()
    adaptive = run(_mlp_loop(model, log), "neuron", adaptive=True)
    assert_same(eager, adaptive)
    assert_same(cpu, adaptive)
    assert log.steps and log.steps[0] <= 4, log.steps  # steady state by step 5 (index 4)
    assert log.steps == list(range(log.steps[0], STEPS)), log.steps  # and it stays there
    s = ae.stats()
    assert s["side_exits"] == 0 and s["compilations"] >= 1, s
    text = ae.explain()
    assert "state ready" in text and "replays" in text


def test_same_script_twice_is_deterministic() -> None:
    model = _mlp()
    logs, times = [], []
    for _ in range(2):
        ae.reset()
        log = ReplayLog()
        out = run(_mlp_loop(model, log), "neuron", adaptive=True)
        logs.append(log.steps)
        times.append(out["_ns"])
    assert logs[0] == logs[1] and logs[0]
    assert times[0] == times[1]


def test_with_compile_latency_the_swap_in_step_and_times_are_deterministic() -> None:
    # Latency on, scaled down so the loop reaches its executable: the region is ready
    # 5 ms of simulated time after it gets hot (a few eager steps, more first-tier ones), while the real
    # compile takes wall seconds and races the main thread. The step that first replays
    # and every simulated time depend on the simulated clock alone (issue 8): two runs
    # agree exactly, and swap-in comes later than with latency zero.
    from dataclasses import replace

    from torchneuron.hardware import current_profile, set_hardware
    from torchneuron.hardware.settings import override

    model = _mlp()
    with override(compile_latency=False):
        ae.reset()
        zero = ReplayLog()
        run(_train(model, lambda ps: torch.optim.SGD(ps, lr=0.1), 1, steps=50, log=zero),
            "neuron", adaptive=True)
    base = current_profile()
    set_hardware(replace(base, program_compile_base_ns=5_000_000, program_compile_per_op_ns=0,
                         eager_compile_ns=0))
    logs, times, ready, firsts = [], [], [], []
    try:
        with override(compile_latency=True, cache=False):  # cold: no executable from the cache
            for _ in range(2):
                ae.reset()
                log = ReplayLog()
                out = run(_train(model, lambda ps: torch.optim.SGD(ps, lr=0.1), 1, steps=50,
                                 log=log), "neuron", adaptive=True)
                logs.append(log.program_steps)
                firsts.append(log.steps[0] if log.steps else None)
                times.append(out["_ns"])
                ready.append([r.ready_at_ns for r in ae.regions() if r.executable is not None])
    finally:
        set_hardware(base)
    assert logs[0] and logs[0] == logs[1] and times[0] == times[1] and ready[0] == ready[1], \
        (logs, times, ready)
    assert zero.steps and logs[0][0] > zero.steps[0] + 10, (logs[0], zero.steps)
    # meanwhile the first tier replays as early as the zero-latency run's program did
    assert firsts[0] == firsts[1] and firsts[0] is not None \
        and firsts[0] <= zero.steps[0] + 1, (firsts, zero.steps)


def test_cnn_batchnorm_maxpool_running_stats_replays_by_step_5() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3))

    log = ReplayLog()

    def loop(device: str) -> dict:
        m = clone_to(model, device)
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(2)
        losses = []
        for step in range(STEPS):
            x = torch.randn(4, 2, 8, 8, generator=g).to(device)
            y = torch.randint(0, 3, (4,), generator=g).to(device)
            loss = F.cross_entropy(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            log.mark(step)
        return {"losses": torch.tensor(losses), **state(m)}

    eager = run(loop, "neuron")
    log.steps.clear()
    adaptive = run(loop, "neuron", adaptive=True)
    assert_same(eager, adaptive, rtol=1e-4, atol=1e-5)
    assert_same(run(loop, "cpu"), adaptive, rtol=1e-4, atol=1e-5)
    # steady state by step 5 (index 4) with compile latency zero, and it stays there
    assert log.steps and log.steps[0] <= 4, (log.steps, ae.explain())
    assert log.steps == list(range(log.steps[0], STEPS)), (log.steps, ae.explain())


def test_transformer_lm_dropout_adamw_random_numbers_exact_replays_by_step_5() -> None:
    torch.manual_seed(0)

    class LM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(20, 16)
            self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.2, batch_first=True)
            self.head = torch.nn.Linear(16, 20)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.layer(self.emb(x)))

    model = LM()  # unmodified: every parameter trains (in_proj_bias too, see below)

    log = ReplayLog()

    def loop(device: str) -> dict:
        m = clone_to(model, device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(3)
        losses = []
        for step in range(STEPS):
            x = torch.randint(0, 20, (2, 6), generator=g).to(device)
            y = torch.randint(0, 20, (2, 6), generator=g).to(device)
            loss = F.cross_entropy(m(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            log.mark(step)
        mask = torch.nn.functional.dropout(torch.ones(64, device=device), 0.5)  # the stream after
        return {"losses": torch.tensor(losses), "next_draw": mask, **state(m)}

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    # The key projection's bias has a gradient that is zero in exact arithmetic (softmax
    # is invariant to it): both runs hold rounding noise there, which AdamW normalizes
    # into ~1e-3 steps that depend on summation order (eager's own varies with the thread
    # count). Its query and value slices, and every other tensor, are compared.
    for r in (eager, adaptive):
        b = r.pop("layer.self_attn.in_proj_bias")
        r["in_proj_bias_q_v"] = torch.cat([b[:16], b[32:]])
    # dropout masks identical draw for draw: the generator ends in the same state
    assert_same(eager, adaptive, rtol=1e-4, atol=1e-4, exact=("next_draw",))
    # steady state by step 5 (index 4) with compile latency zero, and it stays there
    assert log.steps and log.steps[0] <= 4, (log.steps, ae.explain())
    assert log.steps == list(range(log.steps[0], STEPS)), (log.steps, ae.explain())
    # verification accepted the regions (the key slice's noise is judged as rounding
    # against a float64 run, ``compiler/rounding.py``), so what replayed was compiled
    assert "verify-mismatch" not in ae.stats()["fallback_reasons"], ae.explain()


def test_gradient_accumulation_every_4_micro_steps() -> None:
    model = _mlp()

    def loop(device: str) -> dict:
        m = clone_to(model, device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(4)
        losses = []
        for step in range(12):
            x = torch.randn(4, 16, generator=g).to(device)
            loss = m(x).pow(2).mean() / 4
            loss.backward()
            if step % 4 == 3:
                opt.step()
                opt.zero_grad()
            losses.append(loss.item())
        return {"losses": torch.tensor(losses), **state(m)}

    assert_same(run(loop, "neuron"), run(loop, "neuron", adaptive=True))
    assert ae.stats()["replays"] >= 2, ae.explain()


def test_gru_cell_over_time_steps() -> None:
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(6, 8)
    try:
        h = cell.to("neuron")(torch.randn(3, 6).to("neuron"))
        h.sum().backward()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"GRUCell fails on the device until branch dev-ops lands its RNN fix: {e}")

    def loop(device: str) -> dict:
        c = clone_to(cell, device)
        opt = torch.optim.SGD(c.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(5)
        losses = []
        for _ in range(5):
            xs = torch.randn(4, 3, 6, generator=g).to(device)
            h = torch.zeros(3, 8, device=device)
            for t in range(4):
                h = c(xs[t], h)
            loss = h.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return {"losses": torch.tensor(losses), **state(c)}

    assert_same(run(loop, "neuron"), run(loop, "neuron", adaptive=True))
    assert ae.stats()["replays"] >= 1, ae.explain()


def _replayed_with(func: object) -> list:
    """Replayed regions holding ``func`` with a lifted scalar among its arguments."""
    out = []
    for r in ae.regions():
        if not r.replays or r.plan is None:
            continue
        if any(f is func and i in r.plan.lift_at for i, (f, *_rest) in enumerate(r.sigs)):
            out.append(r)
    return out


def test_adamw_step_replays_with_lifted_bias_corrections() -> None:
    # AdamW passes per-step floats (bias corrections, step size) into div and addcdiv_:
    # lifted to graph inputs, the optimizer step replays inside the training step's region
    model = _mlp()

    def exp_avg_sq(m: torch.nn.Module, opt: torch.optim.Optimizer) -> dict:
        return {"exp_avg_sq": torch.cat([opt.state[p]["exp_avg_sq"].cpu().flatten()
                                         for p in m.parameters()])}

    def loop(device: str, log: ReplayLog | None = None) -> dict:
        return _train(model, lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1), 6,
                      log=log, extra=exp_avg_sq)(device)

    log = ReplayLog()
    eager = run(loop, "neuron")
    adaptive = run(lambda d: loop(d, log), "neuron", adaptive=True)
    assert_same(eager, adaptive, rtol=1e-5, atol=1e-6)
    assert_same(run(loop, "cpu"), adaptive, rtol=1e-5, atol=1e-6)
    regions = _replayed_with(torch.ops.aten.addcdiv_.default)
    assert regions, ae.explain()
    assert regions[0].replays >= STEPS - 4 and log.steps[0] <= 3, (log.steps, ae.explain())
    assert ae.stats()["side_exits"] == 0, ae.explain()


@pytest.mark.parametrize("schedule", ["exponential", "step"])
def test_sgd_with_lr_scheduler_replays_with_lifted_lr(schedule: str) -> None:
    # a scheduler changes lr: add_(buf, alpha=-lr) gets a new float every step, or (StepLR)
    # every few steps, where a replay of the constant-lr region side-exits at the change
    model = _mlp()
    steps = STEPS if schedule == "exponential" else 16

    loop = _train(model, lambda ps: torch.optim.SGD(ps, lr=0.2, momentum=0.9, weight_decay=1e-3),
                  8, steps, schedule=lambda opt: (
                      torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.8)
                      if schedule == "exponential"
                      else torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)))

    eager = run(loop, "neuron")
    adaptive = run(loop, "neuron", adaptive=True)
    assert_same(eager, adaptive)
    assert_same(run(loop, "cpu"), adaptive)
    regions = _replayed_with(torch.ops.aten.add_.Tensor)
    assert regions and regions[0].replays >= 2, ae.explain()
    if schedule == "exponential":
        assert ae.stats()["side_exits"] == 0, ae.explain()


def test_targets_from_host_data_every_step_replay_whole_steps() -> None:
    # each step builds its target with torch.tensor(host list) and copies its input into
    # a preallocated device buffer: host data enters the region, the step stays one region
    model = _mlp()

    def loop(device: str, log: ReplayLog | None = None) -> dict:
        m = clone_to(model, device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(9)
        xbuf = torch.empty(8, 16, device=device)
        losses = []
        for step in range(STEPS):
            xbuf.copy_(torch.randn(8, 16, generator=g))
            h = m(xbuf)
            y = torch.tensor([[float((step * 7 + 3 * i + j) % 5) for j in range(4)]
                              for i in range(8)], device=device)  # after the forward
            mask = torch.tensor([i % (step % 3 + 2) != 0 for i in range(8)], device=device)
            loss = (F.mse_loss(h, y, reduction="none").sum(1) * mask).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if log is not None:
                log.mark(step)
        return {"losses": torch.tensor(losses), **state(m)}

    log = ReplayLog()
    eager = run(loop, "neuron")
    adaptive = run(lambda d: loop(d, log), "neuron", adaptive=True)
    assert_same(eager, adaptive)
    assert_same(run(loop, "cpu"), adaptive)
    assert log.steps and log.steps[0] <= 3 and log.steps == list(range(log.steps[0], STEPS)), \
        (log.steps, ae.explain())
    s = ae.stats()
    assert s["side_exits"] == 0, ae.explain()
    whole = [r for r in ae.regions() if r.replays and any(
        f is torch.ops.aten.mse_loss.default for f, *_ in r.sigs) and any(
        f is torch.ops.aten.addmm.default for f, *_ in r.sigs)]
    assert whole and whole[0].replays == STEPS - log.steps[0], ae.explain()
