"""Adaptive eager's replay check catches a decomposition that is itself wrong.

A region's reference is the graph adaptive eager captured from the ops the device ran,
before ``prepare`` applies our decomposition table; a deliberately wrong table entry for
``aten.silu`` therefore differs from it on the first replay (refused, eager's numbers),
and with the checks off the wrong numbers would come out (the control).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import assert_same, run
from torchneuron.compiler import decomposition_table
from torchneuron.hardware.settings import override

aten = torch.ops.aten


def _wrong_silu(x: torch.Tensor) -> torch.Tensor:
    return aten.sigmoid.default(x)  # silu is x * sigmoid(x): deliberately wrong


@pytest.fixture()
def wrong_silu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(decomposition_table(), aten.silu.default, _wrong_silu)
    yield


def _loop(device: str) -> dict:
    g = torch.Generator().manual_seed(5)
    w = torch.randn(16, 16, generator=g).to(device)
    outs = []
    for _ in range(8):
        h = torch.randn(8, 16, generator=g).to(device)
        for _ in range(6):
            h = F.silu(h @ w) * 0.5 + h
        outs.append(h.sum().item())
    return {"outs": torch.tensor(outs)}


def test_wrong_decomposition_is_refused_at_the_first_replay(wrong_silu: None) -> None:
    with override(verify=False, ae_verify_first_replay=True):
        eager = run(_loop, "neuron")
        adaptive = run(_loop, "neuron", adaptive=True)
        s = ae.stats()
    assert s["fallback_reasons"].get("verify-mismatch", 0) >= 1, ae.explain()
    refused = [r for r in ae.regions() if r.state is ae.State.BLACKLISTED]
    assert refused and all(r.reason is ae.Reason.VERIFY_MISMATCH for r in refused)
    assert_same(eager, adaptive, rtol=0, atol=0)
    ae.reset()  # the mismatch was the point (conftest refuses any other)


def test_without_the_check_the_wrong_decomposition_changes_results(wrong_silu: None) -> None:
    with override(verify=False, ae_verify_first_replay=False):
        eager = run(_loop, "neuron")
        adaptive = run(_loop, "neuron", adaptive=True)
        assert ae.stats()["replays"] >= 1
    assert not torch.allclose(eager["outs"], adaptive["outs"])
