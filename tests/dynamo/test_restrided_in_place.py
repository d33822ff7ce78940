"""An in-place op whose functional form changes strides compiles with eager's layout.

``x.t().clone().cumsum_(0)``: functionalized, ``cumsum`` returns a contiguous buffer
where eager keeps the transposed layout, and AOTAutograd's check of the neuron wrapper's
``__tensor_unflatten__`` failed: torch.compile raised BackendCompilerFailed. Then the
graph ran eagerly on the device (``prepare:restrided-in-place``); now AOTAutograd traces
the call as ``t.copy_(cumsum(t))`` (``prepare/inplace_layouts.py``), which keeps ``t``'s
strides, and the graph compiles with eager's values, strides and input mutations.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import torchneuron.compiler as tc
from tests.compiler.exact import bits_equal, torch_compile_matches_eager

CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "cumsum_": lambda x: x.t().clone().cumsum_(0),
    "cumprod_": lambda x: x.t().clone().cumprod_(1),
    "tril_": lambda x: x.t().clone().tril_(),
    "input_view_cumsum_": lambda x: x.t().cumsum_(0),
}


@pytest.mark.parametrize("name", CASES)
def test_restrided_in_place_compiles_with_eagers_layout(name: str) -> None:
    fn = CASES[name]
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    cpu, dev = x.clone(), x.to("neuron")
    torch._dynamo.reset()
    tc.reset_stats()
    want = fn(cpu)
    got = torch.compile(fn, backend="neuron")(dev)
    bits_equal(got.cpu(), want)
    assert got.stride() == want.stride()
    bits_equal(dev.cpu(), cpu, "input")
    stats = tc.stats()
    assert not stats["failures_by_stage"] and stats["compilations"] >= 1, tc.explain()


def test_restrided_in_place_with_gradients() -> None:
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    cpu = x.clone().requires_grad_()
    dev = x.to("neuron").requires_grad_()
    torch._dynamo.reset()

    def fn(a: torch.Tensor) -> torch.Tensor:
        return (a * 2).t().clone().cumsum_(0)

    want = fn(cpu)
    got = torch.compile(fn, backend="neuron")(dev)
    bits_equal(got.detach().cpu(), want.detach())
    want.sum().backward()
    got.sum().backward()
    bits_equal(dev.grad.cpu(), cpu.grad, "grad")


def test_an_in_place_fill_inside_a_derivative_formula_keeps_eagers_gradient() -> None:
    """``vector_norm``'s backward fills ``grad / norm`` in place, laid out as its transposed
    input; AOTAutograd's joint graph has it as ``where(...).contiguous()``, which hands
    ``softplus_backward`` a contiguous operand (25 of 396 input-gradient elements were off).
    Dynamo's graph runs eagerly instead, counted as ``prepare:inplace-layout-lost``."""
    x = torch.randn(4, 11, 9, generator=torch.Generator().manual_seed(1))

    def fn(a: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.softplus(a.transpose(1, 2) * 1.5)
        return torch.linalg.vector_norm(h, dim=1)

    cpu, dev = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    torch._dynamo.reset()
    tc.reset_stats()
    fn(cpu).sum().backward()
    got = torch.compile(fn, backend="neuron")(dev)
    got.sum().backward()
    bits_equal(dev.grad.cpu(), cpu.grad, "grad")
    assert tc.stats()["failures_by_stage"] == {"prepare:inplace-layout-lost": 1}, \
        tc.explain()


def test_a_joint_graph_whose_traced_strides_are_not_the_cpus_runs_eagerly() -> None:
    """The backward of ``softplus(gelu(linear(...)).transpose(1, 2))``: PyTorch's fake
    tensors give ``softplus_backward`` of a contiguous gradient and a transposed input a
    transposed result, the CPU kernel a contiguous one, so the backward graph's ``view`` to
    (36, 11) was impossible on the real tensors: the compiler refused it and its eager run
    on the device raised "view size is not compatible". Dynamo's graph now runs eagerly,
    counted as ``prepare:fake-strides-differ``, with eager's gradients."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 11, 9, generator=g)
    w, b = torch.randn(11, 11, generator=g) * 0.3, torch.randn(11, generator=g) * 0.1

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(torch.nn.functional.linear(x.transpose(1, 2).contiguous(),
                                                                w, b))
        return torch.nn.functional.softplus(h.transpose(1, 2))

    tc.reset_stats()
    torch_compile_matches_eager(fn, x, w, b, grad=True)
    assert tc.stats()["failures_by_stage"] == {"prepare:fake-strides-differ": 1}, tc.explain()
