"""Kernels on neuron tensors: direct calls, ``nki_op`` in eager, under torch.compile and
under adaptive eager, with autograd; each kernel charged to the core by its own schedule."""

from __future__ import annotations

import pytest
import torch

import torchneuron
import torchneuron.adaptive_eager as ae
import torchneuron.nki.language as nl
import torchneuron.profiler
from tests.nki.example_kernels import add_kernel, matmul_kernel, tiled_add_kernel
from torchneuron import nki
from torchneuron.hardware import get_core

_stats = __import__("torchneuron.compiler.stats", fromlist=["stats"])


@nki.jit
def mul_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((a.shape[0] + 127) // 128):
        r = slice(i * 128, (i + 1) * 128)
        nl.store(out[r, :], value=nl.multiply(nl.load(a[r, :]), nl.load(b[r, :])))
    return out


@nki.nki_op("nkitest::add")
def nki_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return add_kernel(a, b)


@nki.nki_op("nkitest::tiled_add")
def nki_tiled_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return tiled_add_kernel(a, b)


@nki.nki_op("nkitest::matmul")
def nki_matmul(a_t: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return matmul_kernel(a_t, b)


def _three(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The issue's three kernels in one program: add, tiled add, matmul."""
    s = nki_add(x * 2, y)
    t = nki_tiled_add(s, y).relu()
    return nki_matmul(t, w) + 1


def _three_ref(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return ((x * 2 + y) + y).relu().T @ w + 1


@nki.nki_op("nkitest::mul")
def nki_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return mul_kernel(a, b)


def _mul_setup(ctx, inputs, output):  # noqa: ANN001, ANN202
    ctx.save_for_backward(*inputs)


def _mul_backward(ctx, grad):  # noqa: ANN001, ANN202
    a, b = ctx.saved_tensors
    return nki_mul(grad, b), nki_mul(grad, a)


nki_mul.register_autograd(_mul_backward, setup_context=_mul_setup)


def _kernels(core) -> dict[str, int]:  # noqa: ANN001
    return {k: v for k, v in core.ops.items() if k.startswith("nki.")}


def test_direct_call_on_neuron_charges_the_schedule(fresh_cores):
    a, b = torch.randn(256, 128), torch.randn(256, 128)
    an, bn = a.to("neuron"), b.to("neuron")
    core = get_core(0)
    busy = core.timeline.device_busy_ns
    z = add_kernel(an, bn)
    assert z.device.type == "neuron" and torch.equal(z.cpu(), a + b)
    assert _kernels(core) == {"nki.add_kernel": 1}
    assert core.timeline.device_busy_ns - busy >= add_kernel.last_schedule.total_ns
    first = core.timeline.device_free_ns
    torchneuron.hardware.reset()
    core = get_core(0)
    add_kernel(a.to("neuron"), b.to("neuron")).cpu()
    assert core.timeline.device_free_ns == first + get_core(0).timeline.device_free_ns - first


def test_simulated_time_identical_across_runs(fresh_cores):
    def run() -> int:
        torchneuron.hardware.reset()
        a_t = torch.ones(256, 128, dtype=torch.bfloat16).to("neuron")
        b = torch.ones(256, 512, dtype=torch.bfloat16).to("neuron")
        matmul_kernel(a_t, b)
        return get_core(0).timeline.device_free_ns

    assert run() == run()


def test_profiler_shows_instructions_per_engine(fresh_cores):
    a = torch.randn(256, 64).to("neuron")
    with torchneuron.profiler.profile() as prof:
        add_kernel(a, a)
    tracks = {ev.track for ev in prof.events}
    assert {"nki.dma", "nki.vector"} <= tracks


def test_nki_op_eager_cpu_and_neuron(fresh_cores):
    a, b = torch.randn(256, 32), torch.randn(256, 32)
    assert torch.equal(nki_add(a, b), a + b)
    core = get_core(0)
    z = nki_add(a.to("neuron"), b.to("neuron"))
    assert torch.equal(z.cpu(), a + b)
    assert _kernels(core) == {"nki.add_kernel": 1}


def test_issue_kernels_under_torch_compile(fresh_cores):
    """The three ops are carried into one executable as custom calls: no refusal, no
    eager launch of their kernels, eager's bits."""
    x, y, w = torch.randn(256, 128), torch.randn(256, 128), torch.randn(256, 512)
    before = dict(_stats.stats()["failures_by_stage"])
    compilations = _stats.stats()["compilations"]
    out = torch.compile(_three, backend="neuron")(*(t.to("neuron") for t in (x, y, w)))
    assert torch.equal(out.cpu(), _three(x, y, w))
    torch.testing.assert_close(out.cpu(), _three_ref(x, y, w), rtol=1e-4, atol=1e-3)
    assert _stats.stats()["failures_by_stage"] == before
    assert _stats.stats()["compilations"] == compilations + 1
    assert _kernels(get_core(0)) == {}


def test_direct_kernel_call_under_torch_compile_is_a_graph_break(fresh_cores):
    a, b = torch.randn(256, 32), torch.randn(256, 32)
    f = torch.compile(lambda x, y: add_kernel(x, y), backend="neuron")  # no graph around it
    torch.testing.assert_close(f(a.to("neuron"), b.to("neuron")).cpu(), a + b)
    assert _kernels(get_core(0)) == {"nki.add_kernel": 1}


def test_issue_kernels_under_adaptive_eager(fresh_cores):
    x, y, w = torch.randn(256, 128), torch.randn(256, 128), torch.randn(256, 512)
    xn, yn, wn = (t.to("neuron") for t in (x, y, w))
    ae.reset()  # (ops an earlier test taught the runtime to refuse are forgotten)
    ae.enable()
    try:
        for _ in range(8):
            torch.testing.assert_close(_three(xn, yn, wn).cpu(), _three_ref(x, y, w),
                                       rtol=1e-4, atol=1e-3)
        stats = ae.stats()
    finally:
        ae.disable()
        ae.reset()
    kernels = _kernels(get_core(0))
    # The ops are part of the replayed region (custom calls in its executable): their
    # kernels launch eagerly only while the region is recorded, once per kernel per
    # eager call (a background compile's fake no longer charges the main thread's core).
    eager_calls = 8 - stats["replays"]
    assert stats["replays"] >= 4 and stats["refused_ops"] == {}, stats
    assert kernels == {"nki.add_kernel": eager_calls, "nki.tiled_add_kernel": eager_calls,
                       "nki.matmul_kernel": eager_calls}, kernels


def test_nki_op_autograd_matches_cpu(fresh_cores):
    a, b = torch.randn(128, 16, requires_grad=True), torch.randn(128, 16, requires_grad=True)
    (a * b).sum().backward()
    an = a.detach().to("neuron").requires_grad_()
    bn = b.detach().to("neuron").requires_grad_()
    nki_mul(an, bn).sum().backward()
    torch.testing.assert_close(an.grad.cpu(), a.grad)
    torch.testing.assert_close(bn.grad.cpu(), b.grad)
    assert _kernels(get_core(0))["nki.mul_kernel"] == 3


def test_kernel_error_on_device_names_the_kernel_line(fresh_cores):
    @nki.jit
    def bad(a):
        nl.load(a)  # 256 partitions

    with pytest.raises(nki.NKIError, match=r"partition dimension <= 128") as info:
        bad(torch.zeros(256, 4).to("neuron"))
    assert "test_op.py" in info.value.where and "in bad" in info.value.where


@nki.jit
def scale_inplace_kernel(a, s: float):
    for i in nl.affine_range(a.shape[0] // 128):
        r = slice(i * 128, (i + 1) * 128)
        nl.store(a[r, :], value=nl.multiply(nl.load(a[r, :]), s))


@nki.nki_op("nkitest::scale_", mutates_args=("a",))
def nki_scale_(a: torch.Tensor, s: float) -> None:
    scale_inplace_kernel(a, s)


def test_mutating_nki_op_eager_and_compiled(fresh_cores):
    x = torch.randn(256, 8)
    xn = x.to("neuron")
    nki_scale_(xn, 3.0)
    torch.testing.assert_close(xn.cpu(), x * 3)

    def f(t):  # noqa: ANN001, ANN202
        nki_scale_(t, 2.0)
        return t + 1

    xn2 = x.to("neuron")
    out = torch.compile(f, backend="neuron")(xn2)
    torch.testing.assert_close(out.cpu(), x * 2 + 1)
    torch.testing.assert_close(xn2.cpu(), x * 2)
    # carried into the executable (tests/nki/test_mutating.py): no eager launch
    assert _kernels(get_core(0)) == {"nki.scale_inplace_kernel": 1}


@nki.nki_op("nkitest::scale_as_", mutates_args=("a",))
def nki_scale_as_(a: torch.Tensor, s: float, dtype: torch.dtype) -> None:
    scale_inplace_kernel(a, s)


def test_mutating_nki_op_that_cannot_be_carried_runs_eagerly(fresh_cores):
    """A dtype argument has no JSON form: the graph is refused (``custom-op``) and runs
    eagerly on the device, the op through ``auto_functionalized``'s dense rule."""
    x = torch.randn(256, 8)
    before = _stats.stats()["failures_by_stage"].get("prepare:custom-op", 0)

    def f(t):  # noqa: ANN001, ANN202
        nki_scale_as_(t, 2.0, torch.float32)
        return t + 1

    xn = x.to("neuron")
    out = torch.compile(f, backend="neuron")(xn)
    assert torch.equal(out.cpu(), x * 2 + 1) and torch.equal(xn.cpu(), x * 2)
    assert _stats.stats()["failures_by_stage"]["prepare:custom-op"] == before + 1
    assert _kernels(get_core(0)) == {"nki.scale_inplace_kernel": 1}
