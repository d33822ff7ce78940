"""The recorder's interned records (issue 20, deliverable 4): each entry's signature from
the segment's start, built as the entry is appended and interned, is exactly the one built
from the entries afterwards; two steps' segments are made of the same objects; and a
recorded step leaves no new op records behind."""

from __future__ import annotations

import torch

import torchneuron.adaptive_eager as ae
from torchneuron.adaptive_eager import recorder
from torchneuron.adaptive_eager.detect import Detector
from torchneuron.hardware import settings


def _train(steps: int, sgd: bool = True) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4)).to("neuron")
    opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if sgd
           else torch.optim.AdamW(model.parameters(), lr=1e-2))
    x = torch.randn(5, 8).to("neuron")
    for _ in range(steps):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        loss.item()


def test_signatures_from_the_start_are_the_ones_built_from_the_entries(monkeypatch) -> None:
    """For every closed segment, SGD's (constant floats) and AdamW's (floats changing every
    step): ``relative(0, n)`` from the appended signatures equals ``_relative(0, n)``
    rebuilt from the entries, input slots included; and the same step recorded again is
    the same objects."""
    closed: list[tuple] = []
    end_segment = Detector.end_segment

    def checked(self: Detector, boundary: bool = True) -> None:
        seg = self.ledger.segment
        if seg.entries:
            assert seg.rel0, "a training step's segment keeps its signatures from the start"
            for e in (1, len(seg) // 2, len(seg)):
                assert seg.relative(0, e) == seg._relative(0, e)
            closed.append(seg.relative(0, len(seg))[0])
        end_segment(self, boundary)

    monkeypatch.setattr(Detector, "end_segment", checked)
    with settings.override(ae_hot_threshold=10**9), ae.enabled():
        _train(4)
        _train(4, sgd=False)
    assert len(closed) >= 8
    sgd = [s for s in closed[:len(closed) // 2] if len(s) > 20]
    # the same step again: tuples of the very same (interned) op signatures
    assert sgd[-1] == sgd[-2] and all(a is b for a, b in zip(sgd[-1], sgd[-2], strict=True))


def test_a_segment_whose_start_moved_builds_its_signatures() -> None:
    """After ``drop`` (a sync-free stream cut at its period) the signatures come from the
    entries, rebased on the new start, as before."""
    with settings.override(ae_hot_threshold=10**9), ae.enabled():
        w = torch.ones(4, 4).to("neuron")
        x = torch.ones(4, 4).to("neuron")
        seg = ae._runtime.segment
        for _ in range(3):
            x = (x @ w).relu()
        n = len(seg)
        assert n >= 6 and seg.rel0
        first = seg.relative(0, n)
        seg.drop(2)
        assert not seg.rel0
        sigs, slots = seg.relative(0, n - 2)
        assert (sigs, slots) == seg._relative(0, n - 2)
        assert sigs != first[0][2:]  # rebased: the dropped ops' values are inputs now
        ae._runtime.detector.end_segment()


def test_a_recorded_step_adds_no_op_records_once_seen() -> None:
    """A step recorded again finds every op's description and signature interned: the
    tables do not grow (nothing new outlives the step but the entries)."""
    with settings.override(ae_hot_threshold=10**9), ae.enabled():
        _train(3)
        ops, sigs = len(recorder._OPS), len(recorder._SIGS)
        _train(3)  # a new model: new tensors, the same ops and dataflow
    assert (len(recorder._OPS), len(recorder._SIGS)) == (ops, sigs)
