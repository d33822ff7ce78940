"""Tensors built from Python data inside a compiled function compile and match eager.

``torch.tensor([...], device=x.device)`` (and ``as_tensor``, ``new_tensor``) allocates
on the device with the Python and Fake dispatch keys excluded while Dynamo's fake mode
is active; ``torch.tensor([...]).to(x.device)`` puts a real host constant and a device
move into the AOTAutograd graph. Hugging Face models do both (GPT-2's cache code). Each
must compile as one graph (``fullgraph=True``: no graph break), with no compile failure,
and give eager's numbers.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import torchneuron.compiler as tc


def _tensor_on_device(x: torch.Tensor) -> torch.Tensor:
    return x * torch.tensor([1.5, -2.0], device=x.device)


def _as_tensor_on_device(x: torch.Tensor) -> torch.Tensor:
    return x + torch.as_tensor([[1.0], [2.0], [3.0]], device=x.device)


def _new_tensor(x: torch.Tensor) -> torch.Tensor:
    return x - x.new_tensor([0.25, 4.0])


def _host_constant_moved(x: torch.Tensor) -> torch.Tensor:
    return x + torch.tensor([1.0, 2.0]).to(x.device)


def _int_constant_indexing(x: torch.Tensor) -> torch.Tensor:
    idx = torch.tensor([2, 0], device=x.device)
    return x[idx].sum(0) + torch.tensor(3, device=x.device)


@pytest.mark.parametrize(
    "fn",
    [_tensor_on_device, _as_tensor_on_device, _new_tensor, _host_constant_moved,
     _int_constant_indexing],
    ids=lambda f: f.__name__.strip("_"),
)
def test_constant_tensor_compiles_and_matches(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    torch._dynamo.reset()
    tc.reset_stats()
    x = torch.randn(3, 2)
    want = fn(x)
    got = torch.compile(fn, backend="neuron", fullgraph=True)(x.to("neuron"))
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), want)
    s = tc.stats()
    assert s["failures"] == 0 and s["compilations"] == 1, tc.explain()


def test_returned_constant_is_on_device() -> None:
    """A constant returned as is (no arithmetic on it) is still a neuron tensor."""
    torch._dynamo.reset()

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + 1, torch.tensor([7.0, 8.0], device=x.device)

    a, b = torch.compile(fn, backend="neuron")(torch.zeros(2, device="neuron"))
    assert b.device.type == "neuron" and a.device.type == "neuron"
    torch.testing.assert_close(b.cpu(), torch.tensor([7.0, 8.0]))
    torch.testing.assert_close(a.cpu(), torch.ones(2))


def test_constant_in_a_graph_that_falls_back_runs_eagerly_on_the_device(monkeypatch) -> None:
    """A graph whose compile fails runs op by op on the device: its lifted host constant
    must be moved there too (it raised a mixed-device error)."""
    import torchneuron.dynamo.backend as backend

    def refuse(*args: object, **kwargs: object) -> None:
        raise tc.LoweringError("refused for the test", op="test", reason="test")

    monkeypatch.setattr(backend, "compile_graph", refuse)
    torch._dynamo.reset()
    tc.reset_stats()
    x = torch.randn(3, 2)
    for fn in (_tensor_on_device, _host_constant_moved):
        got = torch.compile(fn, backend="neuron")(x.to("neuron"))
        torch.testing.assert_close(got.cpu(), fn(x))
    assert sum(tc.stats()["eager_fallback_runs"].values()) == 2
