"""The recorder's trail (issue 20, deliverable 4): an op of a segment that repeats one
recorded before is checked against the earlier segment's op and recorded as a reference to
it. The trail must be taken on a repeated step, and must change nothing: every closed
segment (its ops, signatures, input slots, live values), every region and every counter is
what recording each op in full gives, also when a step goes another way midway."""

from __future__ import annotations

from typing import Any

import torch

import torchneuron.adaptive_eager as ae
from torchneuron.adaptive_eager import recorder
from torchneuron.adaptive_eager.detect import Detector
from torchneuron.hardware import settings


def _train(steps: int, branch_at: int | None = None) -> list[float]:
    """SGD steps of a small MLP, each ending in a read of the loss. With ``branch_at``,
    the steps from that one on take another branch in the middle of the forward, chosen
    by a host value (no sync): one more op, whose scalar changes from step to step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4)).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(5, 8).to("neuron")
    losses = []
    for i in range(steps):
        opt.zero_grad()
        h = model[1](model[0](x))
        if branch_at is not None and i >= branch_at:
            h = h * (0.5 if i % 2 == 0 else 0.25)
        loss = model[2](h).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _recorded(monkeypatch: Any, trail: bool, branch_at: int | None) -> dict:
    """Everything recording learned from ``_train``, with the trail on or off: each closed
    segment as (ops, signatures from its start, its input slots, values alive at its end),
    the regions, the counters, explain(); and how many ops the trail took."""
    closed: list[tuple] = []
    end_segment = Detector.end_segment

    def seen(self: Detector, boundary: bool = True) -> None:
        seg = self.ledger.segment
        if seg.entries:
            n = len(seg)
            sigs, slots = seg.relative(0, n)
            assert (sigs, slots) == seg._relative(0, n)
            closed.append(([(e.func, e.static, e.outs, e.key) for e in seg.entries], sigs,
                           len(slots), sorted(seg.live_at(0, n))))
        end_segment(self, boundary)

    taken: list[bool] = []  # per appended op: by the trail (True) or in full
    full = [False]
    append, append_op = recorder.Segment.append, recorder.Segment.append_op

    def appended_in_full(self: recorder.Segment, *args: Any) -> Any:
        taken.append(False)
        full[0] = True
        return append(self, *args)

    def appended(self: recorder.Segment, *args: Any) -> Any:
        if not full[0]:
            taken.append(True)
        full[0] = False
        return append_op(self, *args)

    monkeypatch.setattr(recorder.Segment, "append", appended_in_full)
    monkeypatch.setattr(recorder.Segment, "append_op", appended)
    monkeypatch.setattr(Detector, "end_segment", seen)
    ae.reset()
    with settings.override(ae_hot_threshold=10**9, ae_record_trail=trail), ae.enabled():
        losses = _train(8, branch_at)
    monkeypatch.undo()
    regions = [(r.key, r.state, r.times_seen, r.hot_count, len(r.sigs)) for r in ae.regions()]
    return {"closed": closed, "regions": regions, "stats": ae.stats(), "losses": losses,
            "explain": ae.explain(), "taken": taken}


def test_a_repeated_step_takes_the_trail_and_records_what_recording_in_full_does(
        monkeypatch: Any) -> None:
    fast = _recorded(monkeypatch, True, None)
    full = _recorded(monkeypatch, False, None)
    steps = _by_segment(fast)
    assert len(steps) == 8 and len(steps[-1]) > 20
    # the first step made SGD's momentum buffers (4 ops more): the second is recorded in
    # full too; from the third on, every op but the first is taken by the trail
    assert len(steps[0]) == len(steps[1]) + 4 and not any(steps[0]) and not any(steps[1])
    assert all(not s[0] and all(s[1:]) for s in steps[2:])
    assert not any(full["taken"])
    for key in ("closed", "regions", "stats", "losses", "explain"):
        assert fast[key] == full[key], key
    # the same step again: the very same (interned) signatures
    a, b = fast["closed"][-1][1], fast["closed"][-2][1]
    assert all(x is y for x, y in zip(a, b, strict=True))


def test_a_step_that_goes_another_way_midway_is_recorded_as_in_full(monkeypatch: Any) -> None:
    """From step 4 on, the forward has one more op in its middle (a multiplication by a
    scalar that alternates between two values): the trail is followed up to the first
    op that differs, which is recorded in full (another overload), and what follows is
    recorded exactly as in full. The same overload with another scalar is the trail's op
    but for a float's value (``trail.check_floats``): taken, recorded as its own op."""
    fast = _recorded(monkeypatch, True, 4)
    full = _recorded(monkeypatch, False, 4)
    steps = _by_segment(fast)
    lengths = [len(s) for s in steps]
    assert len(lengths) == 8 and lengths[4] == lengths[3] + 2  # (the mul, its backward's)
    for key in ("closed", "regions", "stats", "losses", "explain"):
        assert fast[key] == full[key], key
    # step 4: another overload at the mul (no trail went that way): the rest in full
    k = steps[4].index(False, 1)
    assert k >= 3 and all(steps[4][1:k]) and not any(steps[4][k:])
    # step 5: the mul's scalar differs from step 4's, and so does its backward's, which
    # carries the scalar too: both taken with their own floats, as every other op
    assert all(steps[5][1:])
    # step 6 goes as step 4 went, step 7 as step 5: the trails of those steps, all of it
    assert all(steps[6][1:]) and all(steps[7][1:])
    assert not any(full["taken"])


def _by_segment(rec: dict) -> list[list[bool]]:
    """The trail flags of each closed segment's ops."""
    out, i = [], 0
    for ops, *_ in rec["closed"]:
        out.append(rec["taken"][i:i + len(ops)])
        i += len(ops)
    assert i == len(rec["taken"])
    return out



def test_the_trail_check_refuses_what_static_of_describes_otherwise() -> None:
    """``trail.check`` takes a call only if ``static_of`` describes it as the trail's op,
    and ``trail.outputs`` a result only if ``outputs_of`` describes it as the op's: another
    shape, dtype, scalar value or scalar type, or another output, is refused."""
    from torchneuron.adaptive_eager import trail

    a = torch.randn(3, 4).to("neuron")
    add = torch.ops.aten.add.Tensor
    call, _, tensors = recorder.static_of(add, (a, a), {"alpha": 2})
    out = torch.add(a, a, alpha=2)
    struct, outs, _ = recorder.outputs_of(out, tensors)
    op = recorder._op_of(add, call, struct, outs)
    assert trail.check(op, (a, a), {"alpha": 2}) == [a, a]
    b = torch.randn(4, 3).to("neuron")
    for args, kwargs in (((b, b), {"alpha": 2}), ((a, a), {"alpha": 3}), ((a, a), {"alpha": 2.0}),
                         ((a.double(), a.double()), {"alpha": 2}), ((a, a), {})):
        assert trail.check(op, args, kwargs) is None
        assert recorder.static_of(add, args, kwargs)[0] != call
    assert trail.outputs(op, out, tensors) == [out]
    assert trail.outputs(op, a, tensors) is None  # the argument itself: not a new value
    assert trail.outputs(op, out.t(), tensors) is None  # other shape and strides
    assert trail.outputs(op, (out,), tensors) is None  # other structure


def test_the_float_blind_check_answers_static_of_for_another_float_and_refuses_the_rest() -> None:
    """``trail.check_floats`` takes a call that is the trail's op but for the values of
    its top-level floats, and answers the ``Call`` that ``static_of`` gives for it (each
    float's repr: -0.0, nan and inf too) and a template with the call's floats; anything
    else that differs (shape, an int for a float, a float in a list) is refused."""
    from torchneuron.adaptive_eager import trail
    from torchneuron.adaptive_eager.signature import rebuild_call

    a = torch.randn(3, 4).to("neuron")
    b = torch.randn(3, 4).to("neuron")
    addcdiv = torch.ops.aten.addcdiv_.default
    div = torch.ops.aten.div.Tensor

    def op_of(func: Any, args: tuple, kwargs: dict) -> tuple:
        call, _, tensors = recorder.static_of(func, args, kwargs)
        out = func(*args, **kwargs)
        struct, outs, _ = recorder.outputs_of(out, tensors)
        return recorder._op_of(func, call, struct, outs)

    op = op_of(addcdiv, (a, a, b), {"value": -0.25})
    for v in (-0.25, 0.5, -0.0, 0.0, float("nan"), float("inf"), 1e-300):
        got = trail.check_floats(op, (a, a, b), {"value": v})
        assert got is not None, v
        call, _, tensors = recorder.static_of(addcdiv, (a, a, b), {"value": v})
        assert got[0] == tensors and got[2] == call, v
        uargs, ukwargs = rebuild_call(got[1], [t._buffer for t in tensors])
        assert repr(ukwargs["value"]) == repr(v) and uargs[0] is a._buffer
    c = torch.randn(4, 3).to("neuron")
    for args, kwargs in (((a, a, b), {"value": -1}), ((a, a, b.double()), {"value": 2.0}),
                         ((a, a, c.t()), {"value": 2.0}), ((a, a, b), {})):
        assert trail.check_floats(op, args, kwargs) is None
        assert recorder.static_of(addcdiv, args, kwargs)[0] != op[4]
    dop = op_of(div, (a, 0.125), {})
    got = trail.check_floats(dop, (a, 3.0), {})
    assert got is not None and got[2] == recorder.static_of(div, (a, 3.0), {})[0]
    assert trail.check_floats(dop, (a, 3), {}) is None  # (an int: another op)
    sop = op_of(torch.ops.aten.sum.dim_IntList, (a, [0], True), {})
    assert trail.check_floats(sop, (a, [0], True), {}) is None  # (no float)


def test_an_op_new_for_its_floats_derives_its_exact_check_from_the_trail_ops(monkeypatch: Any
                                                                             ) -> None:
    """AdamW's ops with this step's bias corrections are new ops every step: the one made
    on the trail (``trail.check_floats``) takes its exact check from the trail op's
    float-blind one, without generating a guard, and that check takes exactly the calls
    the generated one takes; the first call it takes puts the generated check in place."""
    from torchneuron.adaptive_eager import guard, trail
    from torchneuron.adaptive_eager.signature import OpSig

    add_ = torch.ops.aten.add_.Tensor
    p, g = torch.randn(4, 3).to("neuron"), torch.randn(4, 3).to("neuron")

    def op_for(alpha: float) -> tuple:
        call, _, tensors = recorder.static_of(add_, (p, g), {"alpha": alpha})
        struct, outs, _ = recorder.outputs_of(p, tensors)
        return recorder._op_of(add_, call, struct, outs)

    trail_op, new = op_for(0.5123), op_for(0.2512)
    assert trail._floats_check_of(trail_op)
    built = []
    monkeypatch.setattr(trail, "_guard", lambda *a: built.append(a) or guard._guard(*a))
    trail.inherit_checks(new, trail_op)
    exact = new[5][0]
    assert exact is not None and not built
    generated = guard._guard(0, OpSig(add_, new[1], (), new[2]), frozenset()).check
    other = torch.randn(4, 2).to("neuron")
    calls = [((p, g), {"alpha": a}) for a in (0.5123, 1, True, 0.25120000000000003,
                                              float("nan"), -0.2512)]
    calls += [((p, other), {"alpha": 0.2512}), ((p, g), {})]
    for args, kwargs in calls:
        with torch._C.DisableTorchFunctionSubclass():
            assert exact(args, kwargs, [], []) is None
            assert generated(args, kwargs, [], []) is None
    assert new[5][0] is exact and not built
    with torch._C.DisableTorchFunctionSubclass():
        tensors: list = []
        assert exact((p, g), {"alpha": 0.2512}, tensors, []) is not None
        assert generated((p, g), {"alpha": 0.2512}, [], []) is not None
    assert tensors[0] is p and tensors[1] is g and len(built) == 1 and new[5][0] is not exact
