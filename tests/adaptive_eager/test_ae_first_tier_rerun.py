"""The first tier reruns its deferred ops on buffers (``adaptive_eager.deferred``,
``dispatch.rerun``): the same kernels, simulated charges and memory accounting as
running them through eager dispatch, which it skips (issue 20: the first tier cost
1.3-1.5x eager's host time per step).

A loop is trained with the default compile latency (so only the first tier replays) with
and without the rerun path (``facts_of`` answering None sends every op through eager
dispatch, as before): every step's simulated time, the peak of simulated memory, the
losses and the parameters must be identical, and the rerun path must have been taken.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from tests.loops import make_loop
from torchneuron import adaptive_eager as ae
from torchneuron.adaptive_eager import deferred
from torchneuron.dispatch.rerun import Facts
from torchneuron.hardware import get_core
from torchneuron.hardware.core import reset as reset_cores
from torchneuron.hardware.settings import override

STEPS = 7


def _run(name: str) -> tuple[list[int], int, list[torch.Tensor], list[torch.Tensor], int]:
    reset_cores()
    torch.manual_seed(0)
    loop = make_loop(name, "eager")
    core = get_core(0)
    times, losses = [], []
    ae.reset()
    with ae.enabled():
        for _ in range(STEPS):
            t0 = core.now
            losses.append(loop.step().cpu())
            times.append(core.now - t0)
        stats = ae.stats()
    assert stats["first_tier_replays"] == stats["replays"] > 0, stats
    reruns = sum(isinstance(f, Facts) for r in ae.regions() for f in (r.rerun_facts or ()))
    params = [p.detach().cpu().clone() for p in loop.model.state_dict().values()]
    return times, core.memory.peak, losses, params, reruns


@pytest.mark.parametrize("name", ["res_mlp", "cnn"])
def test_rerun_charges_and_computes_as_eager_dispatch(name: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with override(compile_latency=True, cache=False):
        times, peak, losses, params, reruns = _run(name)
        monkeypatch.setattr(deferred, "facts_of", lambda *a: None)
        want_times, want_peak, want_losses, want_params, none = _run(name)
    assert reruns > 0 and none == 0
    assert times == want_times
    assert peak == want_peak
    assert all(torch.equal(a, b) for a, b in zip(losses, want_losses, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(params, want_params, strict=True))


def test_a_kept_view_of_values_nobody_holds_is_counted_as_in_eager() -> None:
    """A first-tier run counts the values no tensor holds any more without a holder each
    (``buffers.Holding``); a kept view of one (``h.t()`` of a dead ``h``, in inference
    mode) takes its storage over, counted once: simulated memory after every step and each step's peak
    are eager's."""

    def run(adaptive: bool) -> tuple[list[tuple[int, int]], int]:
        reset_cores()
        torch.manual_seed(0)
        x = torch.randn(16, 32, device="neuron")
        w = torch.randn(32, 64, device="neuron")
        memory = get_core(0).memory
        seen = []
        ae.reset()
        with ae.enabled() if adaptive else contextlib.nullcontext():
            for _ in range(12):
                memory.reset_peak()  # each step's own peak
                # (a view in inference mode runs on eager dispatch's own path: its
                # argument, a value no tensor holds, gets a wrapper in the run)
                with torch.inference_mode():
                    h = torch.relu(x @ w) * 2  # nobody keeps ``x @ w``, its relu, or ``h``
                    out = h.t()
                    del h
                out.cpu()
                seen.append((memory.allocated, memory.peak))
            first_tier = ae.stats()["first_tier_replays"]
        return seen, first_tier

    with override(compile_latency=True, cache=False):
        got, first_tier = run(True)
        want, _ = run(False)
    assert first_tier > 0
    assert got == want
