"""torch.compile on neuron tensors that are views, when their shape changes.

A compiled function called on ``ids[:, :-1]`` (an LM's inputs) with a new sequence
length crashed inside Dynamo: it rebuilds a view input of a tensor subclass by replaying
the view on its fake base, and with symbolic sizes that leaves expressions Dynamo will not
bind. Neuron views are static graph inputs (``NeuronTensor._dynamo_static_indices``).
Values are small integers in float32, so every sum is exact on any CPU path."""

from __future__ import annotations

import pytest
import torch

import torchneuron.compiler as tc

pytestmark = pytest.mark.same_on_every_cpu


def _ids(rows: int, length: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 7, (rows, length), generator=g).float()


@pytest.mark.parametrize("view", ["slice", "transpose", "narrow"])
def test_view_inputs_of_changing_shape_compile_with_eagers_values(view: str) -> None:
    torch._dynamo.reset()
    tc.reset_stats()
    take = {
        "slice": lambda t: t[:, :-1],
        "transpose": lambda t: t.t(),
        "narrow": lambda t: t.narrow(1, 1, t.shape[1] - 2),
    }[view]

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2 + 1).sum(1) * x.shape[1]

    cf = torch.compile(f, backend="neuron")
    for i, length in enumerate((12, 16, 13, 12)):
        ids = _ids(4, length, i)
        got = cf(take(ids.to("neuron")))
        assert torch.equal(got.cpu(), f(take(ids))), (view, length)
    assert tc.stats()["failures"] == 0, tc.explain()


def test_mark_static_still_marks_a_tensor_that_is_not_a_view() -> None:
    x = torch.zeros(3, 4).to("neuron")
    assert not hasattr(x, "_dynamo_static_indices")
    torch._dynamo.mark_static(x, 1)
    assert x._dynamo_static_indices == {1}
    assert x[:, 1:]._dynamo_static_indices == {0, 1}
