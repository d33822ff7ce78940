"""Which pending values a region's end gives buffers to: those the program still holds.

The replay keeps a weak reference to each value's producer (``replay._Value``), which only
the value's tensor holds. Session 12 tried a reference count instead (the producer held
by the replay, "held" when its count passed the references the runtime's own frames were
guessed to make): any reference the guess did not foresee then made a dropped
intermediate look held, and the region ended eagerly (``live-value-not-output``), a side
exit. Two such references, each tested here:
- after a ``torch.cond`` whose Dynamo trace raised (torch 2.13, CPython 3.11), a running
  function's arguments count one reference more, for the rest of the process: this is
  what made ``make test`` fail in ``tests/nki/test_mutating.py`` when its worker had run
  ``tests/dispatch/test_control_flow.py::test_cond_errors_as_cpu`` before;
- a tracer that looks at the frames it is called for (``sys.settrace``: a debugger
  showing variables, a tool logging arguments): a frame whose ``f_locals`` was read keeps
  a dict of its locals, refreshed at every trace event, the runtime's own frames included.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
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
    yield
    ae.reset()


def _replays_under(around: Callable[[Callable[[], list[torch.Tensor]]], list[torch.Tensor]]
                   ) -> None:
    """Three replayed steps run by ``around``: no side exit, eager's bits."""
    torch.manual_seed(0)
    x, w = torch.randn(64, 32), torch.randn(64, 32)
    want = _step(x, w)
    xn, wn = x.to("neuron"), w.to("neuron")
    with ae.enabled():
        for _ in range(4):  # recorded, compiled (latency zeroed), replayed
            assert torch.equal(_step(xn, wn).cpu(), want)
        before = ae.stats()
        gots = around(lambda: [_step(xn, wn).cpu() for _ in range(3)])
        after = ae.stats()
    assert before["replays"] > 0, before
    assert after["side_exits"] == 0, after["fallback_reasons"]  # (nor while warming up)
    assert after["replays"] - before["replays"] == 3, after
    assert all(torch.equal(g, want) for g in gots)


def test_a_tracer_does_not_make_dropped_values_look_held(fresh_cores, _adaptive) -> None:
    def traced(steps: Callable[[], list[torch.Tensor]]) -> list[torch.Tensor]:
        old = sys.gettrace()
        sys.settrace(_tracer)
        try:
            return steps()
        finally:
            sys.settrace(old)

    _replays_under(traced)


def test_a_failed_cond_trace_does_not_make_dropped_values_look_held(fresh_cores,
                                                                     _adaptive) -> None:
    _failed_cond()
    _replays_under(lambda steps: steps())


def _failed_cond() -> None:
    """A ``torch.cond`` whose branches' dtypes differ: Dynamo's trace of it raises."""
    x = torch.ones(3)
    try:
        torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.int(), (x,))
    except Exception as e:  # noqa: BLE001 - torch's error type for it is internal
        assert "dtype" in str(e), e  # noqa: PT017
    else:
        raise AssertionError("torch.cond took branches of different dtypes")
