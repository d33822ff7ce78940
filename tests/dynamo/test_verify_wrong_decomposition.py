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


def _wrong_tanh_backward(grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return aten.mul.Tensor(grad, aten.rsub.Scalar(y, 1))  # 1 - y, not 1 - y**2: wrong


@pytest.fixture()
def wrong_tanh_backward(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(decomposition_table(), aten.tanh_backward.default,
                        _wrong_tanh_backward)
    torch._dynamo.reset()
    tc.reset_stats()
    yield
    torch._dynamo.reset()


def _tanh_step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w).sum()


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "control"])
def test_wrong_backward_decomposition_gives_eager_gradients(
        wrong_tanh_backward: None, monkeypatch: pytest.MonkeyPatch, checked: bool) -> None:
    """The forward is right, the compiled backward wrong: caught at the first backward,
    eager's gradient handed on, the graph refused (the next steps run eagerly). The
    control (the undecomposed check off) hands out the wrong gradient."""
    if not checked:
        monkeypatch.setattr(backend, "verify_first_call", lambda compiled, gm, host, i: compiled)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(5, 3, generator=g)
    xs = [torch.randn(4, 5, generator=g) for _ in range(3)]
    wn = w.to("neuron").requires_grad_()
    w = w.requires_grad_()
    cf = torch.compile(_tanh_step, backend="neuron")
    with override(verify=True):
        for x in xs:
            _tanh_step(x, w).backward()
            cf(x.to("neuron"), wn).backward()
            if not checked:
                break
    if checked:
        torch.testing.assert_close(wn.grad.cpu(), w.grad, rtol=0, atol=0)
        assert tc.stats()["failures_by_stage"] == {"verify:verify-mismatch": 1}, tc.explain()
    else:
        assert not torch.allclose(wn.grad.cpu(), w.grad)
        assert "verify:verify-mismatch" not in tc.stats()["failures_by_stage"]


def test_two_backward_passes_through_the_checked_call_agree_with_eager() -> None:
    """``retain_graph``: each pass's gradients are checked against its own tangents."""
    torch._dynamo.reset()
    tc.reset_stats()
    g = torch.Generator().manual_seed(1)
    w, x = torch.randn(5, 3, generator=g), torch.randn(4, 5, generator=g)
    wn = w.to("neuron").requires_grad_()
    w = w.requires_grad_()
    cf = torch.compile(lambda x, w: torch.tanh(x @ w), backend="neuron")
    with override(verify=True):
        out, ref = cf(x.to("neuron"), wn), torch.tanh(x @ w)
        for scale in (1.0, 3.0):
            (out.sum() * scale).backward(retain_graph=True)
            (ref.sum() * scale).backward(retain_graph=True)
    torch.testing.assert_close(wn.grad.cpu(), w.grad)
    assert "verify:verify-mismatch" not in tc.stats()["failures_by_stage"], tc.explain()
    torch._dynamo.reset()
