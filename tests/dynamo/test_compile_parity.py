"""torch.compile(backend="neuron") gives the numbers eager gives on the device.

Each model is trained for a few optimizer steps twice from the same weights: once
eagerly on the neuron device, once through torch.compile; outputs, gradients,
parameters and buffers must agree to fp32 tolerances that allow reassociated sums.
Both runs must also have *compiled* (no silent fallback): the compile stats are
checked.
"""

from __future__ import annotations

import copy

import pytest
import torch

import torchneuron.compiler as tc
from tests import models

pytestmark = pytest.mark.slow

_TOL = {"rtol": 1e-4, "atol": 1e-5}


def _assert_state_close(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        torch.testing.assert_close(x.cpu(), y.cpu(), **_TOL, msg=f"state {name} differs")
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        if p.grad is not None or q.grad is not None:
            torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), **_TOL, msg=f"grad {name}")


@pytest.mark.parametrize(
    "name,opt",
    [("mlp", torch.optim.SGD), ("tiny_lm", torch.optim.AdamW), ("dropout_mlp", torch.optim.AdamW),
     ("cnn", torch.optim.SGD)],
)
def test_training_matches_eager(name: str, opt: type) -> None:
    tc.reset_stats()
    base = models.build(name)
    eager, compiled = copy.deepcopy(base).to("neuron"), copy.deepcopy(base).to("neuron")
    opt_e, opt_c = opt(eager.parameters(), lr=1e-2), opt(compiled.parameters(), lr=1e-2)
    step = torch.compile(compiled, backend="neuron")
    x, y = models.batch(name)
    x, y = x.to("neuron"), y.to("neuron")
    for i in range(3):
        torch.manual_seed(100 + i)
        le = models.loss(name, eager(x), y)
        le.backward()
        torch.manual_seed(100 + i)
        lc = models.loss(name, step(x), y)
        lc.backward()
        torch.testing.assert_close(lc.cpu(), le.cpu(), **_TOL)
        _assert_state_close(compiled, eager)
        opt_e.step(), opt_c.step()
        opt_e.zero_grad(), opt_c.zero_grad()
    _assert_state_close(compiled, eager)
    s = tc.stats()
    assert s["failures"] == 0, tc.explain()
    assert s["compilations"] >= 2  # forward and backward


def test_inference_encoder_matches_eager() -> None:
    """An inference-only transformer encoder under no_grad: one inference graph."""
    tc.reset_stats()
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval().to("neuron")
    x = torch.randn(2, 10, 32).to("neuron")
    with torch.no_grad():
        want = enc(x)
        got = torch.compile(enc, backend="neuron")(x)
    torch.testing.assert_close(got.cpu(), want.cpu(), **_TOL)
    assert tc.stats()["failures"] == 0, tc.explain()


def test_graph_break_and_recompile_on_new_shape() -> None:
    tc.reset_stats()

    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x) * 2
        if y.sum().item() > 0:  # data-dependent branch: a graph break
            y = y + 1
        return torch.relu(y) @ x.T

    cf = torch.compile(f, backend="neuron")
    for shape in [(4, 8), (4, 8), (6, 8)]:
        x = torch.randn(shape).to("neuron")
        torch.testing.assert_close(cf(x).cpu(), f(x).cpu(), **_TOL)
    s = tc.stats()
    assert s["failures"] == 0, tc.explain()
    # two graphs around the break, compiled again for the second shape
    assert s["compilations"] >= 4


def test_dynamic_true_is_refused_clearly() -> None:
    cf = torch.compile(lambda x: x * 2, backend="neuron", dynamic=True)
    with pytest.raises(Exception, match="dynamic=True is not supported"):
        cf(torch.randn(3).to("neuron"))


def test_graph_that_cannot_lower_runs_eagerly_and_is_counted() -> None:
    """igamma has no Torch-MLIR lowering: the graph falls back, numbers stay eager's."""
    tc.reset_stats()

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.igamma(x * x + 1, x * x + 1) * 2 + 1

    cf = torch.compile(f, backend="neuron")
    x = torch.randn(5).to("neuron")
    for _ in range(3):
        torch.testing.assert_close(cf(x).cpu(), f(x.cpu()))
    s = tc.stats()
    assert s["failures"] == 1 and s["compilations"] == 0
    assert list(s["eager_fallback_runs"].values()) == [3]
    assert "lower:" in next(iter(s["failures_by_stage"]))


def test_an_out_of_range_index_raises_eagers_error_forward_and_after_backward() -> None:
    """An embedding of token ids and a gather of computed indices, trained compiled: in
    range, eager's numbers; a bad id or a bad computed index raises eager's exception
    type and message (compiler/index_bounds.py), never a clamped value."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(6, 4)
    dev = copy.deepcopy(emb).to("neuron")

    def f(m: torch.nn.Module, ids: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        h = m(ids)
        return torch.gather(h, 1, (ids % 4 + shift).reshape(-1, 1)).sum()

    torch._dynamo.reset()
    tc.reset_stats()
    compiled = torch.compile(f, backend="neuron")
    ids, shift = torch.tensor([0, 5, 3]), torch.tensor(0)
    want = f(emb, ids, shift)
    got = compiled(dev, ids.to("neuron"), shift.to("neuron"))
    torch.testing.assert_close(got.cpu(), want.detach())
    want.backward()
    got.backward()
    torch.testing.assert_close(dev.weight.grad.cpu(), emb.weight.grad)
    for bad_ids, bad_shift in ((torch.tensor([0, 6, 3]), shift), (ids, torch.tensor(1))):
        with pytest.raises(Exception) as eager:  # noqa: PT011 - whichever type eager raises
            f(emb, bad_ids, bad_shift)
        with pytest.raises(type(eager.value)) as info:
            compiled(dev, bad_ids.to("neuron"), bad_shift.to("neuron"))
        assert str(info.value).splitlines()[0] == str(eager.value).splitlines()[0]
    s = tc.stats()
    assert s["failures"] == 0 and sum(s["eager_fallback_runs"].values()) == 0, tc.explain()


@pytest.mark.parametrize("name", ["one_hot", "multi_margin_loss", "multilabel_margin_loss",
                                  "cross_entropy"])
def test_a_class_out_of_range_raises_eagers_error(name: str) -> None:
    """Ops PyTorch decomposes before the decomposition table (one_hot, multi_margin_loss)
    and the loss family's targets: in range (and ignore_index), eager's numbers; a class
    out of range (above or below), eager's exception type and message, never a zero row
    or a loss over a clamped class (index_bounds.USER_LEVEL_CHECKS, _CHECKED)."""
    import torch.nn.functional as F

    ops = {
        "one_hot": lambda x, t: F.one_hot(t, 4) * x[0, 0],
        "multi_margin_loss": lambda x, t: F.multi_margin_loss(x, t),
        "cross_entropy": lambda x, t: F.cross_entropy(x, t),
        "multilabel_margin_loss": lambda x, t: F.multilabel_margin_loss(x[:, :3], t.expand(3, 3)),
    }
    fn = ops[name]
    x = torch.randn(3, 4)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="neuron")
    # ignore_index; multilabel: 3 classes, -1 ends a row's targets
    good = torch.tensor({"cross_entropy": [3, 0, -100],
                         "multilabel_margin_loss": [2, 0, -1]}.get(name, [3, 0, 1]))
    torch.testing.assert_close(compiled(x.to("neuron"), good.to("neuron")).cpu(), fn(x, good))
    below = -2 if name == "multilabel_margin_loss" else -1
    for bad in (torch.tensor([0, 4, 1]), torch.tensor([0, below, 1])):
        with pytest.raises(Exception) as eager:  # noqa: PT011 - whichever type eager raises
            fn(x, bad)
        with pytest.raises(type(eager.value)) as info:
            compiled(x.to("neuron"), bad.to("neuron"))
        assert str(info.value).splitlines()[0] == str(eager.value).splitlines()[0]


def test_a_failed_index_check_leaves_eagers_writes_and_error() -> None:
    """A write before the failing op (``acc.add_``; embedding's max_norm renormalizes the
    weight rows it looked up) is made in eager before the error: on a failed check the
    compiled graph's inputs are untouched and Dynamo's graph runs eagerly, so the inputs
    and the error are eager's."""
    import torch.nn.functional as F

    def f(acc: torch.Tensor, table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        acc.add_(1.0)
        return table[ids * 2 - 1].sum()

    def g(w: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, w, max_norm=1.0).sum()

    torch._dynamo.reset()
    table, w = torch.randn(10, 4), torch.arange(40.0).reshape(10, 4) + 1
    for fn, args, bad in ((f, [torch.zeros(3), table], torch.tensor([1, 6])),
                          (g, [w], torch.tensor([0, 12]))):
        compiled = torch.compile(fn, backend="neuron")
        good = torch.tensor([1, 2])
        dev_args, eager_args = [a.to("neuron") for a in args], [a.clone() for a in args]
        torch.testing.assert_close(compiled(*dev_args, good.to("neuron")).cpu(),
                                   fn(*eager_args, good))
        with pytest.raises(Exception) as eager:  # noqa: PT011 - whichever type eager raises
            fn(*eager_args, bad)
        with pytest.raises(type(eager.value)) as info:
            compiled(*dev_args, bad.to("neuron"))
        assert str(info.value).splitlines()[0] == str(eager.value).splitlines()[0]
        for got, expected in zip(dev_args, eager_args, strict=True):
            torch.testing.assert_close(got.cpu(), expected)


def test_a_failed_index_check_leaves_the_generator_as_eager() -> None:
    """The compiled graph draws its dropout mask before its index check fails; Dynamo's
    graph then runs eagerly and draws again. The generator is put back first, so the mask,
    the write and every later draw are eager's."""
    import torch.nn.functional as F

    def f(acc: torch.Tensor, table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        acc.add_(F.dropout(torch.ones_like(acc), 0.5))
        return table[ids * 2 - 1].sum()

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="neuron")
    results = {}
    for device, fn in (("cpu", f), ("neuron", compiled)):
        torch.manual_seed(0)
        acc, table = torch.zeros(4, device=device), torch.randn(10, 4, device=device)
        fn(acc, table, torch.tensor([1, 2], device=device))  # compiles; in range
        with pytest.raises(IndexError):
            fn(acc, table, torch.tensor([1, 6], device=device))  # 11: out of range
        results[device] = (acc.cpu(), torch.rand(4, device=device).cpu())
    for got, expected in zip(results["neuron"], results["cpu"], strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_inputs_that_are_views_of_one_storage_give_eagers_results(mode: str) -> None:
    """``a.add_(1); return b * 2`` on overlapping views of one base: ``b`` must see the
    write. Neuron wrappers have storages of their own, so AOTAutograd cannot see the
    aliasing; such a call runs Dynamo's graph eagerly, counted as a fallback run."""

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(1.0)
        return b * 2

    torch._dynamo.reset()
    tc.reset_stats()
    results = {}
    for device, fn in (("cpu", f), ("neuron", torch.compile(f, backend="neuron"))):
        with getattr(torch, mode)():
            base = torch.arange(8.0, device=device)
            out = fn(base[:6], base[2:])
            results[device] = (out.cpu(), base.cpu())
    for got, expected in zip(results["neuron"], results["cpu"], strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert tc.stats()["eager_fallback_runs"].get("aliased-inputs") == 1, tc.explain()


@pytest.mark.parametrize("case", ["base-and-view", "two-views"])
def test_outputs_that_view_one_computed_tensor_stay_views(case: str) -> None:
    """``t, t.view(-1)`` / overlapping slices of a computed ``t``: a later in-place write to
    one output shows in the other, as in eager. Compiled, they came back as separate
    copies; such a graph runs eagerly (a failure with reason ``aliased-outputs``)."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = x * 2
        return (t, t.view(-1)) if case == "base-and-view" else (t.view(-1)[:4], t.view(-1)[2:])

    torch._dynamo.reset()
    tc.reset_stats()
    results = {}
    for device, fn in (("cpu", f), ("neuron", torch.compile(f, backend="neuron"))):
        first, second = fn(torch.arange(6.0).view(2, 3).to(device))
        second.mul_(10)
        first.add_(1)
        results[device] = (first.cpu(), second.cpu())
    for got, expected in zip(results["neuron"], results["cpu"], strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert tc.stats()["failures"] == 1, tc.explain()
