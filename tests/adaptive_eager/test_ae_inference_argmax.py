"""``argmax`` / ``max(dim)`` in a replayed region under ``torch.inference_mode()``.

Why: the interpreter's max-with-first-index reduce keeps, per index operand, whether its
indices increase, and checked that tensor's ``_version`` to see it unchanged. Tensors
made under inference mode have no version counter, so every replay of a region holding
``argmax`` or ``max(dim)`` raised ``ExecuteError ... stablehlo.reduce ... Inference
tensors do not track version counter``: a classifier's predict loop crashed on its
first replay. The index operand (an iota kept as a constant) made in inference mode
stays an inference tensor afterwards, so the same executable run outside inference mode
must work too.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchneuron.adaptive_eager as ae

BATCHES = (4, 6, 4, 5, 4, 6, 4, 4)


def _classifier(device: str) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 5)).eval().to(device)


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(b, 8, generator=g) for b in BATCHES]


def _predict(model: nn.Module, x: torch.Tensor, device: str) -> list[torch.Tensor]:
    p = torch.softmax(model(x.to(device)), -1)
    top, where = p.max(dim=1)
    return [p.argmax(-1).cpu(), top.cpu(), where.cpu()]


def _run(device: str, context) -> list[list[torch.Tensor]]:
    model = _classifier(device)
    out = []
    for x in _inputs():
        with context():
            out.append(_predict(model, x, device))
    return out


def _assert_equal(got: list[list[torch.Tensor]], ref: list[list[torch.Tensor]]) -> None:
    """Indices exactly; the probabilities within the compiler's reassociation tolerance
    (a compiled softmax sums in another order than ATen's vectorised kernel)."""
    for g, r in zip(got, ref, strict=True):
        for a, b in zip(g, r, strict=True):
            assert a.dtype == b.dtype
            if a.dtype.is_floating_point:
                torch.testing.assert_close(a, b, rtol=0, atol=0)
            else:
                assert torch.equal(a, b)


def test_classifier_replays_under_inference_mode() -> None:
    ref = _run("cpu", torch.inference_mode)
    with ae.enabled():
        got = _run("neuron", torch.inference_mode)
        replays = ae.stats()["replays"]
        # the same executables (inference constants inside) outside inference mode
        later = _run("neuron", torch.no_grad)
    _assert_equal(got, ref)
    _assert_equal(later, ref)
    assert replays > 0, ae.explain()
    assert ae.stats()["fallback_reasons"].get("compile-failed", 0) == 0, ae.explain()


@pytest.mark.parametrize("first", ["inference", "no_grad"])
def test_compiled_argmax_in_and_out_of_inference_mode(first: str) -> None:
    """``torch.compile(backend="neuron")``: the same compiled graph under inference mode
    and outside it, in either order (kept constants made by either)."""
    contexts = {"inference": torch.inference_mode, "no_grad": torch.no_grad}
    order = [contexts[first], contexts["no_grad" if first == "inference" else "inference"]]
    model = _classifier("neuron")
    cpu = _classifier("cpu")
    step = torch.compile(lambda x: _predict(model, x, "neuron"), backend="neuron")
    for context in order * 2:
        for x in _inputs()[:3]:
            with context():
                _assert_equal([step(x)], [_predict(cpu, x, "cpu")])
