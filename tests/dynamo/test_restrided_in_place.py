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
from tests.compiler.exact import bits_equal

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
