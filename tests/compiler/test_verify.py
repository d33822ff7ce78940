"""Verification mode: a compiled graph whose numbers differ from eager is caught and refused."""

from __future__ import annotations

import logging

import pytest
import torch

import torchneuron.compiler as tc
from torchneuron.compiler import verify
from torchneuron.compiler.executable import Executable
from torchneuron.compiler.prepare.graph import prepare
from torchneuron.compiler.rounding import copy_preserving_aliases
from torchneuron.hardware.settings import get_value, override


def test_setting_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchneuron.hardware import settings

    monkeypatch.setenv("TORCHNEURON_VERIFY", "1")
    monkeypatch.delitem(settings._values, "verify", raising=False)
    assert get_value("verify") is True and verify.verify_enabled()
    monkeypatch.setenv("TORCHNEURON_VERIFY", "0")
    monkeypatch.delitem(settings._values, "verify", raising=False)
    assert get_value("verify") is False


def test_compare_outputs_names_output_element_and_nearest_op() -> None:
    pg = prepare(lambda x: (x * 2, torch.sin(x).t()), [torch.randn(3, 4)])
    x = torch.randn(3, 4)
    want = list(pg.gm(x))
    assert verify.compare_outputs("g", want, [w.clone() for w in want], graph=pg.gm.graph) is None
    bad = want[1].clone()
    bad[2, 1] += 1e-3
    m = verify.compare_outputs("g", want, [want[0], bad], graph=pg.gm.graph)
    assert m is not None and m.output == 1 and m.index == (2, 1)
    assert "aten.sin.default" in (m.op or ""), m  # through the transpose view
    text = str(m)
    assert "'g'" in text and "rtol=" in text and "atol=" in text and "sin" in text


def test_compare_outputs_tolerates_reassociation_but_not_nan_mismatch() -> None:
    e = torch.tensor([1.0, float("nan"), float("inf")])
    assert verify.compare_outputs("g", [e], [e + 1e-7]) is None
    assert verify.compare_outputs("g", [e], [torch.tensor([1.0, 0.0, float("inf")])]) is not None


def _wrong_run(self: Executable, inputs, core=None, generator_context=None):
    outs = _right_run(self, inputs, core, generator_context)
    return [o + 1 if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in outs]


_right_run = Executable.run


def test_wrong_executable_is_caught_refused_and_eager_numbers_returned(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    tc.reset_stats()
    monkeypatch.setattr(Executable, "run", _wrong_run)

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 3 - 1

    cf = torch.compile(f, backend="neuron")
    x = torch.randn(4, 5).to("neuron")
    with override(verify=True), caplog.at_level(logging.WARNING, "torchneuron.compiler.verify"):
        for _ in range(3):
            torch.testing.assert_close(cf(x).cpu(), f(x.cpu()))
    s = tc.stats()
    assert s["failures_by_stage"] == {"verify:verify-mismatch": 1}, tc.explain()
    assert list(s["eager_fallback_runs"].values()) == [2]  # calls 2 and 3 ran eagerly
    (record,) = [r for r in caplog.records if "differs from eager" in r.getMessage()]
    assert "inference_" in record.getMessage() and "rtol=" in record.getMessage()
    torch._dynamo.reset()


def test_without_verify_the_wrong_executable_goes_unnoticed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the check above can fail only because verification is on."""
    tc.reset_stats()
    monkeypatch.setattr(Executable, "run", _wrong_run)
    cf = torch.compile(lambda x: torch.relu(x) * 5, backend="neuron")
    x = torch.randn(3).to("neuron")
    with override(verify=False):
        got = cf(x).cpu()
    assert not torch.allclose(got, torch.relu(x.cpu()) * 5)
    assert tc.stats()["failures"] == 0
    torch._dynamo.reset()


def test_verified_dropout_graph_agrees_and_keeps_the_random_stream() -> None:
    """Random draws: the reference draws from the same state, so a right graph passes,
    and the device generator ends where eager leaves it."""
    tc.reset_stats()
    drop = torch.nn.Dropout(0.3)
    x = torch.randn(8, 16).to("neuron")
    cf = torch.compile(lambda t: drop(t) * 2, backend="neuron")
    with override(verify=True):
        torch.manual_seed(7)
        got = cf(x).cpu()
        after_compiled = torch.rand(4, device="neuron").cpu()  # the device generator
    torch.manual_seed(7)
    want = (drop(x) * 2).cpu()
    after_eager = torch.rand(4, device="neuron").cpu()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(after_compiled, after_eager)
    assert tc.stats()["failures"] == 0, tc.explain()
    torch._dynamo.reset()


def test_inputs_that_alias_stay_aliased_in_the_reference() -> None:
    """A weight and its transposed view both enter one graph, which updates the weight in
    place (a training step). Cloned one by one, the reference would read the view's old
    values after the update and flag the right executable as wrong."""
    import torch.fx as fx

    def step(w: torch.Tensor, wt: torch.Tensor) -> tuple[torch.Tensor]:
        w.add_(1.0)
        return (wt * 2,)

    gm = fx.symbolic_trace(step)
    w = torch.randn(3, 4)
    args = [w, w.t()]
    outs, mismatch = verify.run_verified("aliased", gm, args, lambda a: list(gm(*a)))
    assert mismatch is None, mismatch
    torch.testing.assert_close(outs[0], (w * 2).t())


def test_copy_preserving_aliases_copies_each_storage_once() -> None:
    base = torch.arange(12.0)
    a, b, c = base.view(3, 4), base[4:8], torch.ones(2)
    ca, cb, cc = copy_preserving_aliases([a, b, c])
    assert ca.untyped_storage().data_ptr() == cb.untyped_storage().data_ptr()
    assert ca.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    ca[1, 0] = -1.0
    assert cb[0].item() == -1.0 and b[0].item() == 4.0  # the copy aliases, the original is untouched
    torch.testing.assert_close(cc, c)


def test_compare_outputs_skips_an_empty_buffer_nothing_writes_but_not_a_filled_one() -> None:
    """A graph output that is (a view of) ``torch.empty`` nothing in the graph writes has
    unspecified values in eager too (FSDP2's all-gather buffer, filled between regions):
    not compared. Written by an op of the graph, it is compared as any output."""
    import torch.fx as fx

    aten = torch.ops.aten
    g = fx.Graph()
    buf = g.call_function(aten.empty.memory_format, ([4],))
    g.output((g.call_function(aten.view.default, (buf, [2, 2])),))
    eager, got = [torch.zeros(2, 2)], [torch.full((2, 2), 7.0)]
    assert verify.compare_outputs("g", eager, got, graph=g) is None
    g2 = fx.Graph()
    buf2 = g2.call_function(aten.empty.memory_format, ([4],))
    g2.call_function(aten.fill_.Scalar, (buf2, 1.0))
    g2.output((buf2,))
    eager, got = [torch.zeros(4)], [torch.full((4,), 7.0)]
    assert verify.compare_outputs("g2", eager, got, graph=g2) is not None
