"""Adaptive eager's first tier: with the default compile latency and a cold cache, a hot
region replays at once as its recorded eager kernels, with eager's bits, until its
compiled program is ready; then the program takes over.

Each zoo loop (``tests/loops.py``) runs on the device eagerly and under adaptive eager
with modeled compile latency on; the losses and every parameter and optimizer value
must equal eager's bit for bit while only the first tier has replayed. The first tier
charges no per-op dispatch (its kernels are issued as one batch).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tests.loops import LOOPS, make_loop
from torchneuron import adaptive_eager as ae
from torchneuron.hardware import current_profile, get_core, set_hardware
from torchneuron.hardware.core import reset as reset_cores
from torchneuron.hardware.settings import override

STEPS = 8


def _train(name: str, adaptive: bool, steps: int = STEPS) -> tuple[list, dict, list[int]]:
    reset_cores()
    loop = make_loop(name, "eager")
    firsts: list[int] = []
    losses = []
    if adaptive:
        ae.reset()
        ae.enable()
    try:
        for step in range(steps):
            before = ae.stats()["first_tier_replays"] if adaptive else 0
            losses.append(loop.step().cpu())
            if adaptive and ae.stats()["first_tier_replays"] > before:
                firsts.append(step)
    finally:
        if adaptive:
            ae.disable()
    params = {k: v.detach().cpu().clone() for k, v in loop.model.state_dict().items()}
    return losses, params, firsts


@pytest.mark.parametrize("name", LOOPS)
def test_first_tier_replays_early_with_eagers_bits(name: str) -> None:
    with override(compile_latency=True, cache=False):
        want_losses, want_params, _ = _train(name, adaptive=False)
        losses, params, firsts = _train(name, adaptive=True)
        stats = ae.stats()
    assert firsts and firsts[0] <= 4, (firsts, stats)
    assert stats["first_tier_replays"] == stats["replays"], stats  # no program yet
    for a, b in zip(losses, want_losses, strict=True):
        assert torch.equal(a, b), (losses, want_losses)
    for k, v in want_params.items():
        assert torch.equal(params[k], v), k


def test_a_first_tier_step_charges_no_dispatch() -> None:
    with override(compile_latency=True, cache=False):
        reset_cores()
        loop = make_loop("res_mlp", "eager")
        ae.reset()
        with ae.enabled():
            for _ in range(STEPS - 1):
                loop.step()
            core = get_core(0)
            dispatch = core.timeline.host_by_category.get("dispatch", 0)
            replays = ae.stats()["first_tier_replays"]
            batches = core.recorded_batches
            loop.step()  # (no sync: this loop's region is its sync-free period)
            assert ae.stats()["first_tier_replays"] > replays
            assert core.recorded_batches > batches
            assert core.timeline.host_by_category.get("dispatch", 0) == dispatch


def test_without_the_first_tier_nothing_replays_before_the_program() -> None:
    with override(compile_latency=True, cache=False, ae_first_tier=False):
        _, _, firsts = _train("res_mlp", adaptive=True)
        assert not firsts and ae.stats()["replays"] == 0, ae.stats()


def test_the_program_takes_over_when_its_compile_is_done() -> None:
    """Compile latency scaled down (5 ms after the region gets hot): the first tier
    replays first, the compiled program later; results within float32 reassociation."""
    base = current_profile()
    set_hardware(replace(base, program_compile_base_ns=5_000_000, program_compile_per_op_ns=0))
    try:
        with override(compile_latency=True, cache=False):
            want_losses, _, _ = _train("res_mlp", adaptive=False, steps=40)
            losses, _, firsts = _train("res_mlp", adaptive=True, steps=40)
            stats = ae.stats()
    finally:
        set_hardware(base)
    assert firsts and stats["first_tier_replays"] > 0, stats
    assert stats["replays"] > stats["first_tier_replays"], stats  # the program replayed too
    for a, b in zip(losses, want_losses, strict=True):
        torch.testing.assert_close(a, b)
