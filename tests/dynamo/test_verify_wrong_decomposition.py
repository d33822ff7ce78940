"""TORCHNEURON_VERIFY catches a decomposition that is itself wrong (torch.compile).

A deliberately wrong entry for ``aten.silu`` is put in our decomposition table (it forgets
the ``x *``). AOTAutograd applies the table before the compiler sees the graph, so the
per-graph check (``compiler/verify.py``), whose reference is that decomposed graph,
agrees with the wrong executable; the check against Dynamo's graph run eagerly
(``dynamo/verify_graph.py``) does not. The control test shows the per-graph check alone
hands out the wrong numbers, so the first test can fail.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

import torchneuron.compiler as tc
import torchneuron.dynamo.backend as backend
from torchneuron.compiler import decomposition_table
from torchneuron.hardware.settings import override

aten = torch.ops.aten


def _wrong_silu(x: torch.Tensor) -> torch.Tensor:
    return aten.sigmoid.default(x)  # silu is x * sigmoid(x): deliberately wrong


@pytest.fixture()
def wrong_silu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(decomposition_table(), aten.silu.default, _wrong_silu)
    torch._dynamo.reset()
    tc.reset_stats()
    yield
    torch._dynamo.reset()


def f(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x) * 2 + 1


def test_wrong_decomposition_is_caught_refused_and_eager_numbers_returned(
        wrong_silu: None, caplog: pytest.LogCaptureFixture) -> None:
    cf = torch.compile(f, backend="neuron")
    x = torch.randn(4, 5).to("neuron")
    with override(verify=True), caplog.at_level(logging.WARNING, "torchneuron.compiler.verify"):
        for _ in range(3):
            torch.testing.assert_close(cf(x).cpu(), f(x.cpu()), rtol=0, atol=0)
    s = tc.stats()
    assert s["failures_by_stage"] == {"verify:verify-mismatch": 1}, tc.explain()
    (record,) = [r for r in caplog.records if "differs from eager" in r.getMessage()]
    assert "Dynamo's graph" in record.getMessage()


def test_wrong_decomposition_under_training_forward(wrong_silu: None) -> None:
    """A graph with a backward: the forward's wrong output is caught, and the refused
    graph's eager run gives eager's gradient too."""
    w = torch.randn(5, 3, requires_grad=True)
    x = torch.randn(4, 5)
    loss_eager = f(x @ w).sum()
    loss_eager.backward()
    wn = w.detach().to("neuron").requires_grad_()
    cf = torch.compile(lambda x, w: f(x @ w).sum(), backend="neuron")
    with override(verify=True):
        loss = cf(x.to("neuron"), wn)
        loss.backward()
    torch.testing.assert_close(loss.cpu(), loss_eager.detach(), rtol=0, atol=0)
    torch.testing.assert_close(wn.grad.cpu(), w.grad, rtol=0, atol=0)
    assert tc.stats()["failures_by_stage"] == {"verify:verify-mismatch": 1}, tc.explain()


def test_without_the_undecomposed_reference_the_wrong_decomposition_goes_unnoticed(
        wrong_silu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: only the per-graph check (today's, against the decomposed graph)."""
    monkeypatch.setattr(backend, "verify_first_call", lambda compiled, gm, host, index: compiled)
    cf = torch.compile(f, backend="neuron")
    x = torch.randn(4, 5).to("neuron")
    with override(verify=True):
        out = cf(x).cpu()
    assert not torch.allclose(out, f(x.cpu()))
    assert "verify:verify-mismatch" not in tc.stats()["failures_by_stage"]
