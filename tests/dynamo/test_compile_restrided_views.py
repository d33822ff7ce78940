"""torch.compile on a view whose sizes or strides an in-place op changed gives CPU's results.

Why: Dynamo fakes a view of a tensor subclass by replaying the view op that made it
(``t[2:]``); after ``resize_``, ``set_``, an ``out=`` op or ``t_``/``unsqueeze_``
changed the view, the replay no longer matched and every frame taking it failed in
Dynamo ("Expected cond to be True"). ``resize_`` on a graph input is a graph break in
PyTorch, so the frame after it takes the changed view even when the user passed an
ordinary one.
"""

from __future__ import annotations

import pytest
import torch

_CHANGES = {
    "resize_": lambda v: v.resize_(3),
    "resize_as_": lambda v: v.resize_as_(torch.ones(2, device=v.device)),
    "set_": lambda v: v.set_(torch.zeros(3, device=v.device)),
    "out=": lambda v: torch.add(torch.ones(5, device=v.device), 1, out=v),
    "as_strided_": lambda v: v.as_strided_((2,), (2,)),
    "t_": lambda v: v.view(2, 5).t_(),
    "unsqueeze_": lambda v: v.unsqueeze_(0),
}


def _changed_then_used(name: str):  # noqa: ANN202
    def fn(v: torch.Tensor) -> torch.Tensor:
        w = _CHANGES[name](v)
        return w * 2 + 1

    return fn


@pytest.mark.parametrize("name", list(_CHANGES))
def test_view_changed_in_place_under_compile(name: str) -> None:
    def run(dev: str, backend: str) -> list:
        torch._dynamo.reset()
        t = torch.arange(12.0, device=dev)
        v = t[2:]
        out = torch.compile(_changed_then_used(name), backend=backend)(v)
        return [out.cpu().tolist(), tuple(v.shape), v.stride(), t.cpu().tolist()]

    assert run("neuron", "neuron") == run("cpu", "eager")


def test_view_changed_before_the_compiled_call() -> None:
    def run(dev: str, backend: str) -> list:
        torch._dynamo.reset()
        t = torch.arange(12.0, device=dev)
        v = t[2:]
        v.resize_(4)
        out = torch.compile(lambda v: v.sin() + 1, backend=backend)(v)
        return [out.cpu(), v.shape]

    (cpu, cpu_shape), (neuron, neuron_shape) = run("cpu", "eager"), run("neuron", "neuron")
    torch.testing.assert_close(neuron, cpu)
    assert neuron_shape == cpu_shape
