"""Which pending values a region's end gives buffers to: those the program still holds.

The replay keeps a weak reference to each value's producer (``replay._Value``), which only
the value's tensor holds. Session 12 tried a reference count instead (the producer held
by the replay, "held" when its count passed the references the runtime's own frames were
guessed to make): any reference the guess did not foresee then made a dropped
intermediate look held, and the region ended eagerly (``live-value-not-output``), a side
exit. A tracer that looks at the frames it is called for is one such reference
(``sys.settrace``: a debugger showing variables, a tool logging arguments): a frame whose
``f_locals`` was read keeps a dict of its locals, refreshed at every trace event, the
runtime's own frames included. A program run under such a tracer must replay as it does
without one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import FrameType

import pytest
import torch

import torchneuron.adaptive_eager as ae


def _step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x * w + 1  # intermediates the program drops before the region ends
    return torch.relu(h) * 2


def _tracer(frame: FrameType, event: str, arg: object) -> None:
    """A global trace function that reads each new frame's locals, and traces no further."""
    frame.f_locals  # noqa: B018 - read as a debugger would, to show them
    return None


@pytest.fixture
def _adaptive() -> Iterator[None]:
    ae.reset()
    ae.enable()
    yield
    ae.disable()
    ae.reset()


def test_a_tracer_does_not_make_dropped_values_look_held(fresh_cores, _adaptive) -> None:
    torch.manual_seed(0)
    x, w = torch.randn(64, 32), torch.randn(64, 32)
    want = _step(x, w)
    xn, wn = x.to("neuron"), w.to("neuron")
    for _ in range(4):  # recorded, compiled (latency zeroed), replayed
        assert torch.equal(_step(xn, wn).cpu(), want)
    before = ae.stats()
    old = sys.gettrace()
    sys.settrace(_tracer)
    try:
        gots = [_step(xn, wn).cpu() for _ in range(3)]
    finally:
        sys.settrace(old)
    after = ae.stats()
    assert before["replays"] > 0, before
    assert after["side_exits"] == before["side_exits"], after["fallback_reasons"]
    assert after["replays"] - before["replays"] == 3, after
    assert all(torch.equal(g, want) for g in gots)
