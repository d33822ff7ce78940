"""Side-exit back-off: exits now and then between good replays keep the region
replaying; a region that exits every time is backed off (``Region.record_exit``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import ReplayLog, assert_same, run, state
from torchneuron.adaptive_eager.region import Region, State

STEPS = 30
EXIT = ae.Reason.GUARD_MISMATCH


def _loop(diverges, log: ReplayLog | None = None, early: bool = False,
          shift: int | None = None):
    """An MLP trained with SGD and momentum, ``loss.item()`` each step; in the steps where
    ``diverges(step)``, its output (``early``: its first layer's, two ops into the step)
    is rolled by ``step`` rows: a shift no earlier step used, so the step's region
    side-exits there, and no region can learn what follows (``shift``: by that many rows,
    the same op each time)."""
    def loop(device: str) -> dict:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(1)
        losses = []
        for step in range(STEPS):
            x = torch.randn(8, 16, generator=g).to(device)
            y = torch.randn(8, 4, generator=g).to(device)
            h = m[0](x)
            if early and diverges(step):
                h = h.roll(step if shift is None else shift, 0)
            out = m[2](m[1](h))
            if not early and diverges(step):
                out = out.roll(step if shift is None else shift, 0)
            loss = F.mse_loss(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if log is not None:
                log.mark(step)
        return {"losses": torch.tensor(losses), **state(m)}
    return loop


def _check(diverges, early: bool = False, shift: int | None = None) -> ReplayLog:
    cpu = run(_loop(diverges, early=early, shift=shift), "cpu")
    eager = run(_loop(diverges, early=early, shift=shift), "neuron")
    log = ReplayLog()
    adaptive = run(_loop(diverges, log, early, shift), "neuron", adaptive=True)
    assert_same(eager, adaptive)
    assert_same(cpu, adaptive)
    return log


@pytest.mark.parametrize("early", [False, True])
def test_a_region_that_exits_every_5th_step_keeps_replaying_the_others(early: bool) -> None:
    log = _check(lambda step: step % 5 == 4, early)
    first = log.steps[0]
    assert first <= 4, log.steps
    others = [s for s in range(first, STEPS) if s % 5 != 4]
    assert set(others) <= set(log.steps), (others, log.steps)  # never backed off
    s = ae.stats()
    assert s["side_exits"] >= len([s for s in range(first, STEPS) if s % 5 == 4]) - 1, s
    assert ae.Reason.BACKED_OFF.value not in s["fallback_reasons"], ae.explain()
    step_region = max((r for r in ae.regions() if r.exits), key=lambda r: r.replays)
    assert step_region.state is State.READY and step_region.backoffs == 0, ae.explain()


def test_a_region_that_exits_every_time_is_still_backed_off() -> None:
    _check(lambda step: step >= 6, early=True)
    s = ae.stats()
    assert s["fallback_reasons"].get(ae.Reason.BACKED_OFF.value, 0) > 0, ae.explain()
    exited = [r for r in ae.regions() if r.exits]
    assert exited and all(r.backoffs >= 1 or r.state is State.BLACKLISTED for r in exited), \
        ae.explain()


def test_exits_at_the_same_op_again_end_there_as_a_variant() -> None:
    # the same roll every 5th step: the second exit there makes the region's ops before
    # it a variant, and later rolling steps end as that variant instead of exiting
    log = _check(lambda step: step % 5 == 4, shift=3)
    s = ae.stats()
    assert s["side_exits"] == 2 and s["variant_switches"] >= 3, ae.explain()
    assert set(range(log.steps[0], STEPS)) - set(log.steps) <= {4, 9}, log.steps


def _ready() -> Region:
    r = Region("k", ())
    r.to(State.HOT)
    r.to(State.COMPILING)
    r.to(State.READY)
    return r


def _drive(pattern: str, times: int, exits: int = 3, starts: int = 4) -> Region:
    """Replay ``pattern`` (``x``: a side exit, ``.``: a good replay) ``times`` times."""
    r = _ready()
    for _ in range(times):
        for c in pattern:
            if r.state is State.BLACKLISTED:
                return r
            if r.skip_starts:
                r.skip_starts -= 1  # as ``Runtime.try_start`` skips a backed-off region
                continue
            r.to(State.REPLAYING)
            if c == "x":
                r.record_exit(EXIT, 1, exits_before_backoff=exits, backoff_starts=starts)
            else:
                r.record_replay()
                r.to(State.READY)
    return r


@pytest.mark.parametrize("pattern", ["....x", ".x", "..xx"])
def test_exits_no_more_often_than_good_replays_never_back_off(pattern: str) -> None:
    r = _drive(pattern, 50)
    assert r.backoffs == 0 and r.state is State.READY and r.exits[EXIT] >= 50


@pytest.mark.parametrize("pattern", ["x", ".xx", "xxx.", "x.xx"])
def test_exits_that_outnumber_good_replays_back_off_then_blacklist(pattern: str) -> None:
    r = _drive(pattern, 100)
    assert r.state is State.BLACKLISTED, (r.backoffs, r.exits)


def test_bursts_of_exits_far_apart_are_forgiven() -> None:
    # three exits in a row (a back-off), then more good replays than the back-off
    # skipped: four bursts would blacklist a region that never forgave
    r = _drive("xxx" + "." * 10, 6)
    assert r.state is State.READY and r.backoffs <= 1, (r.backoffs, r.exits)
    assert r.exits[EXIT] == 18
