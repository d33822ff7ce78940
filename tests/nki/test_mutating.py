"""``nki_op``s that write an input (``mutates_args``) in eager, under torch.compile and
under adaptive eager: carried into the program as a custom call on copies of the written
arguments, whose new values the program copies back (``auto_functionalized``), with
eager CPU's bits for the outputs and for the written inputs."""

from __future__ import annotations

import pytest
import torch

import torchneuron
import torchneuron.adaptive_eager as ae
import torchneuron.nki.language as nl
from torchneuron import nki
from torchneuron.hardware import get_core

_stats = __import__("torchneuron.compiler.stats", fromlist=["stats"])


@nki.jit
def accumulate_kernel(acc, x, s: float):
    """``acc += s * x`` in place, 128 rows at a time (a gradient accumulator's update)."""
    for i in nl.affine_range((acc.shape[0] + 127) // 128):
        r = slice(i * 128, (i + 1) * 128)
        nl.store(acc[r, :], value=nl.add(nl.load(acc[r, :]), nl.multiply(nl.load(x[r, :]), s)))


@nki.nki_op("nkimut::accumulate_", mutates_args=("acc",))
def accumulate_(acc: torch.Tensor, x: torch.Tensor, s: float) -> None:
    accumulate_kernel(acc, x, s)


@nki.nki_op("nkimut::accumulate_both_", mutates_args=("a", "b"))
def accumulate_both_(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Writes two arguments and returns a value computed from them."""
    accumulate_kernel(a, x, 0.25)
    accumulate_kernel(b, x, -1.5)
    return a * b


def _step(acc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    accumulate_(acc, x * 2, 0.5)
    return (acc * 3).sum()


def _two(acc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Two slices of one input written by one call, read again after it."""
    y = accumulate_both_(acc[:128], acc[128:], x[:128])
    return y + acc.sum()


def _kernel_launches() -> int:
    return get_core(0).ops.get("nki.accumulate_kernel", 0)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(256, 64), torch.randn(256, 64)


def test_mutating_op_eager_on_device_matches_cpu(fresh_cores):
    acc, x = _inputs()
    want_acc = acc.clone()
    want = _step(want_acc, x)  # eager on CPU: the same op, the same kernel's numbers
    torch.testing.assert_close(want_acc, acc + (x * 2) * 0.5, rtol=0, atol=0)
    acc_n = acc.to("neuron")
    got = _step(acc_n, x.to("neuron"))
    assert torch.equal(got.cpu(), want) and torch.equal(acc_n.cpu(), want_acc)
    assert _kernel_launches() == 1


@pytest.mark.parametrize("fn", [_step, _two])
def test_mutating_op_compiled_is_carried_with_eager_bits(fresh_cores, fn):
    acc, x = _inputs()
    want_acc = acc.clone()
    want = fn(want_acc, x)
    before = dict(_stats.stats()["failures_by_stage"])
    acc_n = acc.to("neuron")
    got = torch.compile(fn, backend="neuron")(acc_n, x.to("neuron"))
    assert _stats.stats()["failures_by_stage"] == before  # not refused: no eager graph
    assert torch.equal(got.cpu(), want)
    assert torch.equal(acc_n.cpu(), want_acc)  # the written input, copied back
    assert _kernel_launches() == 0  # inside the executable, not launched eagerly


def test_mutating_op_replayed_under_adaptive_eager(fresh_cores):
    """An accumulator carried across steps: each replay writes it as eager does."""
    acc, x = _inputs()
    want_acc = acc.clone()
    wants = [_step(want_acc, x) for _ in range(8)]
    acc_n, x_n = acc.to("neuron"), x.to("neuron")
    ae.reset()
    ae.enable()
    try:
        gots = [_step(acc_n, x_n).cpu() for _ in range(8)]
        stats = ae.stats()
    finally:
        ae.disable()
        ae.reset()
    assert stats["replays"] >= 4 and stats["refused_ops"] == {}, stats
    assert stats["compile_failures"] == 0 and stats["side_exits"] == 0, stats
    assert all(torch.equal(g, w) for g, w in zip(gots, wants, strict=True))
    assert torch.equal(acc_n.cpu(), want_acc)
    assert _kernel_launches() == 8 - stats["replays"]  # eager only while not replayed


def _hop_with_slice(acc: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The form functionalization gives a call on a slice of an intermediate whose view
    it tracks: the base, and the slice as ``_acc_slice_*``."""
    from torch._higher_order_ops.auto_functionalize import auto_functionalized_v2

    base = acc * 1
    _, new_base = auto_functionalized_v2(
        torch.ops.nkimut.accumulate_.default, x=x[:192], s=0.5, _acc_base_index=0,
        _acc_slice_dim=0, _acc_slice_start=64, _acc_slice_end=256, _all_bases=[base])
    return new_base, base


def test_mutated_slice_of_a_base_regenerated_on_the_copy():
    acc, x = _inputs()
    exe = torchneuron.compiler.compile_graph(_hop_with_slice, [acc, x])
    assert "custom_call @nki.nkimut.accumulate_" in exe.stablehlo
    new_base, base = exe.run([acc, x])
    want = acc.clone()
    accumulate_(want[64:], x[:192], 0.5)
    assert torch.equal(new_base, want)
    assert torch.equal(base, acc)  # the operand the call read is not written


def test_mutated_strided_view_is_refused_saying_why():
    from torch._higher_order_ops.auto_functionalize import auto_functionalized_v2

    def f(acc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        base = acc * 1
        return auto_functionalized_v2(
            torch.ops.nkimut.accumulate_.default, x=x[::2], s=0.5, _acc_base_index=0,
            _acc_size=(128, 64), _acc_stride=(128, 1), _acc_storage_offset=0,
            _all_bases=[base])[1]

    with pytest.raises(torchneuron.compiler.CompileError, match="strided view") as info:
        torchneuron.compiler.compile_graph(f, list(_inputs()))
    assert info.value.reason == "custom-op" and info.value.op == "nkimut::accumulate_"


def test_first_form_of_auto_functionalized_carried_too():
    """``auto_functionalized`` (v1, export's form): each written argument its own base."""
    from torch._higher_order_ops.auto_functionalize import auto_functionalized

    def f(acc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return auto_functionalized(torch.ops.nkimut.accumulate_.default, acc=acc * 1, x=x,
                                   s=0.5)[1]

    acc, x = _inputs()
    exe = torchneuron.compiler.compile_graph(f, [acc, x])
    assert "custom_call @nki.nkimut.accumulate_" in exe.stablehlo
    want = acc.clone()
    accumulate_(want, x, 0.5)
    assert torch.equal(exe.run([acc, x])[0], want)


@torch.no_grad()
def _sgd(params: list[torch.Tensor]) -> None:
    """An optimizer step whose weight update is the kernel, written through ``.t()``."""
    for p in params:
        if p.dim() == 2:
            accumulate_(p.t(), p.grad.t(), -0.1)
        else:
            p.add_(p.grad, alpha=-0.1)


def test_mutating_op_as_a_compiled_optimizer_step(fresh_cores):
    """Parameters (leaves that require grad) written in place by the kernel under
    ``no_grad``, the step compiled: eager CPU's losses and parameters, bit for bit."""
    torch.manual_seed(0)
    model, x = torch.nn.Linear(64, 128), torch.randn(256, 64)

    def train(m: torch.nn.Module, xx: torch.Tensor, step: object) -> list[torch.Tensor]:
        losses = []
        for _ in range(3):
            m.zero_grad()
            loss = m(xx).square().mean()
            loss.backward()
            step(list(m.parameters()))  # type: ignore[operator]
            losses.append(loss.detach().cpu())
        return losses + [p.detach().cpu() for p in m.parameters()]

    on_device = torch.nn.Linear(64, 128)
    on_device.load_state_dict(model.state_dict())
    before = dict(_stats.stats()["failures_by_stage"])
    got = train(on_device.to("neuron"), x.to("neuron"), torch.compile(_sgd, backend="neuron"))
    want = train(model, x, _sgd)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    assert _stats.stats()["failures_by_stage"] == before and _kernel_launches() == 0
