"""The generated dataflow check (``dataflow.generate``) decides every case exactly as the
general ``Replay._bind`` does, and leaves the same state (arguments, input slots)."""

from __future__ import annotations

from typing import Any

import torch

import torchneuron  # noqa: F401
from torchneuron.adaptive_eager import dataflow
from torchneuron.adaptive_eager.replay import Replay, _Value


def _replay() -> Any:
    rp = Replay.__new__(Replay)  # only the state the check reads and writes
    rp.slots, rp.ext, rp.ext_buffers = {}, [], []
    rp.index = 0  # the device of the tensors the cases make
    return rp


def _state(rp: Any) -> tuple:
    """What the check leaves behind: the input slots it took, with their buffers."""
    return sorted(rp.slots.values()), [id(b) for b in rp.ext_buffers]


def _pending(rp: Any, ik: tuple[int, int]) -> torch.Tensor:
    t = torch.empty(2, device="neuron")
    t._pending = _Value(rp, ik)
    return t


def _same(ops: list) -> list[bool]:
    """Run ``ops`` ((tensors, flow) with tensors made for a replay) on two replays, one
    through generated checks and one through the general check; both must agree."""
    fast, general = _replay(), _replay()
    decided = []
    for make, flow in ops:
        a = dataflow.generate(flow, _Value, Replay._bind)(fast, make(fast))
        b = Replay._bind(general, make(general), flow)
        assert a == b, (flow, a, b)
        assert _state(fast) == _state(general), flow
        decided.append(a)
    return decided


def test_generated_dataflow_check_is_the_general_one() -> None:
    x, w = torch.randn(2, device="neuron"), torch.randn(2, device="neuron")
    ik = (0, 0)
    kept: dict[int, torch.Tensor] = {}

    def own(k: tuple[int, int]) -> Any:
        def make(rp: Any) -> list:
            kept[id(rp)] = t = _pending(rp, k)
            return [t]
        return make

    ended = _replay()
    old = _pending(ended, (5, 0))
    old._pending.result = torch.ones(2)  # a value of a replay that has ended
    fresh, moved = torch.randn(2, device="neuron"), torch.randn(2, device="neuron")
    assert _same([
        (lambda rp: [x, w], (0, 1)),  # two new inputs, in order
        (lambda rp: [w, x], (1, 0)),  # seen before, same buffers
        (lambda rp: [x], (1,)),  # the wrong slot
        (lambda rp: [fresh], (3,)),  # a new input out of order (it takes slot 2)
        (own(ik), (ik,)),  # this replay's value, the recorded tuple itself
        (own(ik), ((0, 0),)),  # an equal tuple
        (own((0, 1)), (ik,)),  # another value
        (lambda rp: [x, w], (0,)),  # arity
        (lambda rp: [fresh], (2,)),
        (lambda rp: [old], (3,)),  # an ended replay's value: now an input with a buffer
        (lambda rp: [moved, old], (4, 3)),
    ]) == [True, True, False, False, True, True, False, False, True, True, True]
    moved.buffer = torch.zeros(2)  # the wrapper's buffer replaced after its first use
    fast, general = _replay(), _replay()
    for rp in (fast, general):
        Replay._bind(rp, [moved], (0,))
    moved.buffer = torch.full((2,), 3.0)
    assert dataflow.generate((0,), _Value, Replay._bind)(fast, [moved]) is False
    assert Replay._bind(general, [moved], (0,)) is False


def test_an_input_on_another_device_ends_the_replay_and_raises_as_eager() -> None:
    """A replayed region is one device's: an input on another neuron device is refused
    by the dataflow check (generated and general), so the op runs eagerly and raises
    eager's mixed-device error instead of computing on the region's device."""
    import pytest

    import torchneuron.adaptive_eager as ae

    w = torch.ones(4, device="neuron:0")
    c0 = torch.full((4,), 5.0, device="neuron:0")
    c1 = torch.full((4,), 5.0, device="neuron:1")
    ae.reset()
    ae.enable()
    try:
        for _ in range(8):
            assert ((w * 2 + c0) * 3).cpu().tolist() == [21.0] * 4
        assert ae.stats()["replays"] > 0
        for first in (False, True):  # the foreign input first or second
            with pytest.raises(RuntimeError, match="same device"):
                x = w * 2
                (c1 + x if first else x + c1) * 3
    finally:
        ae.disable()
