"""An op recorded on its trail runs on buffers with eager's facts (``adaptive_eager.trailrun``,
issue 20, deliverable 4): the same kernels, simulated charges, memory accounting and
executed-op counts as running it through eager dispatch, which it skips, and the same
recording.

A loop is recorded (no region ever hot) with and without that path (``facts_of``
answering None sends every op through eager dispatch, as before): every step's simulated
time, the peak of simulated memory, the ops counted as executed, the losses and the
parameters, and everything recording learned (regions, counters, explain()) must be
identical, and the path must have been taken.
"""

from __future__ import annotations

import pytest
import torch

from tests.loops import Loop, make_loop
from torchneuron import adaptive_eager as ae
from torchneuron.adaptive_eager import recorder, trailrun
from torchneuron.adaptive_eager.signature import InputRef
from torchneuron.device.tensor import wrap_buffer
from torchneuron.dispatch import executed_ops, reset_op_tracking
from torchneuron.hardware import get_core
from torchneuron.hardware.core import reset as reset_cores
from torchneuron.hardware.settings import override

STEPS = 8


def _clipped_adamw() -> Loop:
    """An MLP trained with gradient clipping (``linalg_vector_norm``: eager runs it on
    the host) and AdamW (whose ``div`` and ``addcdiv_`` take bias corrections that change
    every step)."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4)).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(5, 8).to("neuron")

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    return Loop("clipped_adamw", "eager", step, model)


def _run(name: str, monkeypatch: pytest.MonkeyPatch) -> tuple:
    reset_cores()
    reset_op_tracking()
    torch.manual_seed(0)
    loop = _clipped_adamw() if name == "clipped_adamw" else make_loop(name, "eager")
    core = get_core(0)
    taken = [0]
    run = trailrun.run

    def counted(*args: object) -> object:
        out = run(*args)  # type: ignore[arg-type]
        taken[0] += out is not None and out[1] is not trailrun.NOT_RUN
        return out

    monkeypatch.setattr(trailrun, "run", counted)
    times, losses = [], []
    ae.reset()
    with ae.enabled():
        for _ in range(STEPS):
            t0 = core.now
            losses.append(loop.step().cpu())
            times.append(core.now - t0)
        stats = ae.stats()
    assert stats["ops_recorded"] > 0 and stats["replays"] == 0, stats
    regions = [(r.key, r.state, r.times_seen, r.hot_count) for r in ae.regions()]
    params = [p.detach().cpu().clone() for p in loop.model.state_dict().values()]
    return (times, core.memory.peak, executed_ops(), losses, params, stats, regions,
            ae.explain(), taken[0])


@pytest.mark.parametrize("name", ["res_mlp", "cnn", "clipped_adamw"])
def test_an_op_on_its_trail_runs_and_is_recorded_as_through_eager_dispatch(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with override(ae_hot_threshold=10**9, cache=False):
        got = _run(name, monkeypatch)
        monkeypatch.setattr(trailrun, "facts_of", lambda *a: None)
        monkeypatch.setattr(trailrun, "_FACTS", {})  # (none kept from the first run)
        want = _run(name, monkeypatch)
    # from the third step on nearly every op is on its trail
    assert got[-1] > got[5]["ops_recorded"] // 2 and want[-1] == 0, (got[-1], got[5])
    times, peak, executed, losses, params, stats, regions, explain, _ = got
    assert times == want[0]
    assert peak == want[1]
    assert executed == want[2]
    assert all(torch.equal(a, b) for a, b in zip(losses, want[3], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(params, want[4], strict=True))
    assert (stats, regions, explain) == want[5:8]


def test_an_op_on_its_trail_but_for_a_float_or_run_on_the_host_runs_on_buffers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """From the third step on, AdamW's ``div`` and ``addcdiv_`` (their bias corrections
    are new every step: the trail's op but for a float, ``trail.check_floats``) and
    clipping's ``linalg_vector_norm`` (eager runs it on the host, ``facts_of(...,
    fallbacks=True)``) run on buffers like every other op on its trail: the ops that go
    through eager dispatch are only the first of each segment (which picks its trail)."""
    from torchneuron.adaptive_eager import mode

    on_buffers = [False]
    run = trailrun.run

    def counted(*args: object) -> object:
        out = run(*args)  # type: ignore[arg-type]
        on_buffers[0] = out is not None and out[1] is not trailrun.NOT_RUN
        return out

    record = mode.Runtime.record
    dispatched: list[tuple] = []  # (step, the op, its position in the segment)

    def recorded(self: mode.Runtime, func: object, *args: object) -> object:
        on_buffers[0] = False
        n = len(self.segment.entries)
        out = record(self, func, *args)  # type: ignore[arg-type]
        if not on_buffers[0]:
            dispatched.append((step[0], str(func), n))
        return out

    monkeypatch.setattr(trailrun, "run", counted)
    monkeypatch.setattr(mode.Runtime, "record", recorded)
    torch.manual_seed(0)
    loop = _clipped_adamw()
    step = [0]
    ae.reset()
    with override(ae_hot_threshold=10**9, cache=False), ae.enabled():
        for i in range(6):
            step[0] = i
            loop.step().cpu()
        assert ae.stats()["replays"] == 0
    late = [d for d in dispatched if d[0] >= 2]
    assert late and all(n == 0 for _, _, n in late), late


def test_tensors_sharing_a_buffer_or_on_another_device_go_through_eager_dispatch() -> None:
    """Eager's key tells two arguments that are one buffer apart from two buffers, so the
    facts found for ``add(x0, x1)`` with two buffers are not those of a call whose two
    tensors share one (and are not kept from such a call either); an argument on
    another device is eager dispatch's to refuse."""
    add = torch.ops.aten.add.Tensor
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    x, y = wrap_buffer(a, 0), wrap_buffer(b, 0)
    call, template, tensors = recorder.static_of(add, (x, y), {})
    struct, outs, _ = recorder.outputs_of(add(x, y), tensors)
    op = recorder._op_of(add, call, struct, outs)
    sig = recorder._sig_of(add, op[1], outs, (InputRef("x", 0), InputRef("x", 1)))
    x2 = wrap_buffer(a, 0)  # another tensor over x's buffer
    z = wrap_buffer(b, 1)

    def run(*tensors: torch.Tensor) -> object:
        got = trailrun.run(recorder.Segment(), sig, op, tensors, {}, list(tensors), template, 0,
                           get_core(0))
        assert got is not None and got[0][2] == [recorder.vid_of(t) for t in tensors]
        return got[1:]

    assert run(x, x2)[0] is trailrun.NOT_RUN
    assert id(sig) not in trailrun._FACTS  # (not kept from that call)
    assert run(x, z)[0] is trailrun.NOT_RUN
    op[5][1] = True  # (the template is the two tensors: what the trail's check says)
    out, leaves = run(x, y)
    assert torch.equal(out.cpu(), a + b) and out is not x and out is not y and leaves == [out]
    assert run(x, x2)[0] is trailrun.NOT_RUN
    # the same tensor twice is not the trail's dataflow (two input slots)
    assert trailrun.run(recorder.Segment(), sig, op, (x, x), {}, [x, x], template, 0, get_core(0)) is None

def test_an_output_is_taken_for_the_trail_ops_exactly_when_outputs_of_describes_it_so() -> None:
    """``trailrun._single`` says, without describing it, whether ``outputs_of`` would
    describe an op's one output as the trail op's: the argument itself, a view of the
    first argument whose storage it is, or a new value, with its metadata and size."""
    a = torch.randn(4, 6)
    x, y = wrap_buffer(a, 0), wrap_buffer(a[1:], 0)  # y: a view of x's storage
    e = wrap_buffer(torch.randn(0, 6), 0)
    results = [x, y, x.t(), y.t(), x + 1, (x + 1).t(), x[1:], x[:3], e, e + 1, x.double(),
               wrap_buffer(torch.randn(5, 6)[:4], 0)]  # (x + 1 with more bytes)
    lists = ([x], [y], [x, y], [y, x], [e, x], [e], [x, e])
    # every description of every result, for every list of arguments
    candidates = list(dict.fromkeys(recorder.outputs_of(r, ts)[1][0]
                                    for ts in lists for r in results))
    for tensors in lists:
        bufs = [t._buffer for t in tensors]
        for res in results:
            described = recorder.outputs_of(res, tensors)[1][0]
            for o in candidates:
                if o[0] != "new" and o[-1] >= len(tensors):  # (the trail op's arity is the call's)
                    continue
                want = [res] if described == o else None
                assert trailrun._single(o, res, tensors, bufs) == want, (res.shape, o)


def test_an_op_whose_dataflow_is_not_the_trails_is_recorded_with_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps that are the same ops on the same metadata but take their arguments from
    other values of the step (the operands of a sum swapped, an input used before or
    after another) every other step: each closed segment's signatures from its start are
    those its entries give (``Segment._relative``), the ops whose dataflow is the trail's
    ran on it, and the others did not."""
    from torchneuron.adaptive_eager.detect import Detector

    closed = []
    end_segment = Detector.end_segment

    def seen(self: Detector, boundary: bool = True) -> None:
        seg = self.ledger.segment
        if seg.entries:
            n = len(seg)
            closed.append(seg.relative(0, n))
            assert closed[-1] == seg._relative(0, n)
        end_segment(self, boundary)

    ran = [0, 0]  # ops on the trail: with its dataflow, without
    run = trailrun.run

    def counted(*args: object) -> object:
        out = run(*args)  # type: ignore[arg-type]
        ran[out is None] += 1
        return out

    monkeypatch.setattr(Detector, "end_segment", seen)
    monkeypatch.setattr(trailrun, "run", counted)
    x = torch.randn(4, 4).to("neuron")
    w = torch.randn(4, 4).to("neuron")
    ae.reset()
    with override(ae_hot_threshold=10**9), ae.enabled():
        for i in range(8):
            a, b = (x, w) if i % 2 else (w, x)
            h1, h2 = a * 2.0, b * 3.0
            s = h1 + h2 if i % 4 < 2 else h2 + h1
            (s @ (a if i % 3 else b)).sum().cpu()
    assert ran[0] > 0 and ran[1] > 0, ran
    assert len(closed) == 8 and closed[3] != closed[1] and closed[2] != closed[0]


def test_a_constant_template_is_rebuilt_by_its_generated_function_as_by_rebuild_call() -> None:
    """``trailrun.rebuilder``: the call is ``rebuild_call``'s, leaf for leaf (the tensors
    and scalars themselves, the same types, new lists and tuples); a dict or a subclass
    of a sequence is not generated."""
    from torchneuron.adaptive_eager.signature import Slot, rebuild_call

    class L(list):
        pass

    s0, s1, s2 = Slot(0), Slot(1), Slot(2)
    bufs = [torch.zeros(1), torch.ones(1), torch.zeros(2)]
    templates = [((s0, [0], True), {}), ((s1, s0), {"alpha": -0.5}), ((s2,), {}),
                 (([s1, s0, None], (s2, 3), ()), {"dim": (1,), "keepdim": False}),
                 ((s0, [[s1], (s2, [])], 2.0), {}), ((), {"x": s0, "y": [s1, s0]})]

    def same(a: object, b: object) -> bool:
        if type(a) is not type(b):
            return False
        if type(a) in (list, tuple):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
        if type(a) is dict:
            return list(a) == list(b) and all(same(a[k], b[k]) for k in a)  # type: ignore[index]
        return a is b

    for t in templates:
        rb = trailrun.rebuilder(t)
        assert rb is not None
        got, want = rb(bufs), rebuild_call(t, bufs)
        assert same(got, want), (t, got, want)
        again = rb(bufs)  # (new sequences every call: none is shared between calls)
        assert all(x is not y for x, y in zip(again[0], got[0], strict=True) if type(x) in (list, tuple)
                   and len(x)), t
    assert trailrun.rebuilder(((s0, {"a": s1}), {})) is None
    assert trailrun.rebuilder(((s0, L([s1])), {})) is None
