"""Learning which ops grow from step to step (``growing``): the rules without tensors, then
loops whose results are compared to eager on the CPU."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import assert_same, clone_to, run
from torchneuron.adaptive_eager import growing
from torchneuron.adaptive_eager.growing import ANY, Growing, matches, steady
from torchneuron.adaptive_eager.signature import OpSig, Static

aten = torch.ops.aten


def _t(*shape: int) -> tuple:
    """The static description of a contiguous f32 tensor argument (as ``static_of``)."""
    strides = tuple(int(torch.empty(shape).stride(i)) for i in range(len(shape)))
    return ("T", (shape, strides, 0, torch.float32))


def _op(*args: tuple) -> tuple:
    return (("U", (("U", args), ("K", ()))), False, False)


def _step(length: int, layers: int = 1) -> list[tuple]:
    """A decoding step: fixed projections around a cat onto a cache of ``length``."""
    fixed = [(aten.mm.default, _op(_t(1, 16), _t(16, 16)))] * 4
    layer = [
        (aten.cat.default, _op(("L", (_t(length, 16), _t(1, 16))), ("int", 0))),
        (aten.mm.default, _op(_t(1, 16), _t(16, length + 1))),
    ] + fixed
    return fixed + layer * layers


def _feed(g: Growing, ops: list[tuple]) -> None:
    """One step whose ops were all recorded."""
    for f, s in ops:
        g.saw(f, s)
    g.step_ended()


def _varies(g: Growing, ops: list[tuple]) -> list[bool]:
    """Which ops of a step run between regions (the rest recorded); ends the step."""
    out = []
    for f, s in ops:
        v = g.varies(f, s)
        out.append(v)
        (g.ran_between if v else g.saw)(f, s)
    g.step_ended()
    return out


def _steady_by_recursion(a: object, b: object, c: object) -> object:
    """``steady`` as it was written before its loop skipped equal parts without a call:
    the reference its answers are compared with."""
    if isinstance(a, tuple):
        if a == b == c:
            return a
        if not isinstance(b, tuple) or not isinstance(c, tuple) or not len(a) == len(b) == len(c):
            return None
        parts = []
        for x, y, z in zip(a, b, c, strict=True):
            w = _steady_by_recursion(x, y, z)
            if w is None:
                return None
            parts.append(w)
        return tuple(parts)
    if type(a) is int and type(b) is int and type(c) is int:
        if a == b == c:
            return a
        return ANY if b - a == c - b != 0 else None
    if a == b == c and type(a) is type(b) is type(c):
        return a
    return None


# descriptions that are alike but for one leaf's value, type or length (1, True and 1.0
# are equal in Python but not to a pattern), a named tuple, an empty tuple
_LEAVES = [0, 1, 2, 3, True, False, 1.0, "1", None, torch.float32, torch.int64, ANY]
_SHAPES = [(), (1,), (True,), (1.0,), (1, 2), (1, 2, 3), ((1,), 2), ((True,), 2), ([1], 2),
           ("T", ((2, 16), (16, 1), 0, torch.float32)), ("T", ((3, 16), (16, 1), 0, torch.float32)),
           ("T", ((True, 16), (16, 1), 0, torch.float32)), Static(("U", ()), False, False, "single"),
           Static(("U", ()), 0, False, "single")]


def test_a_patterns_matcher_answers_as_matches_and_steady_as_its_recursion() -> None:
    """``matcher`` (generated per pattern) answers as ``matches`` for every pattern and
    description here, types of leaves included; ``steady``, whose loop takes equal parts
    without a call, answers as the plain recursion, identity of its answer included."""
    values = [*_LEAVES, *_SHAPES]
    patterns = [*values, ("T", ((ANY, 16), (16, 1), ANY, torch.float32)), (ANY,), (ANY, 2),
                ((ANY,), 2), Static(("U", ()), ANY, False, "single")]
    for p in patterns:
        m = growing.matcher(p)
        assert growing.matcher(p) is m  # generated once per pattern
        for d in values:
            assert bool(m(d)) == bool(matches(p, d)), (p, d)
    for a in values:
        for b in values:
            for c in (a, b, (1, 2), ("T", ((4, 16), (16, 1), 0, torch.float32))):
                want, got = _steady_by_recursion(a, b, c), steady(a, b, c)
                assert got == want and type(got) is type(want), (a, b, c)
                assert repr(got) == repr(want), (a, b, c)
    # a part equal but for its type, beside a part that moves steadily
    for a, b, c in [((1, 2), (True, 3), (1, 4)), ((1.0, 2), (1, 3), (1, 4)),
                    (((1,), 2), ((True,), 3), ((1,), 4)), ((None, 2), (None, 3), (None, 4))]:
        want, got = _steady_by_recursion(a, b, c), steady(a, b, c)
        assert got == want and repr(got) == repr(want), (a, b, c)


def test_steady_replaces_only_ints_that_change_steadily() -> None:
    pat = steady(_t(3, 16), _t(4, 16), _t(5, 16))
    assert pat == ("T", ((ANY, 16), (16, 1), 0, torch.float32))
    assert steady(("float", "0.5"), ("float", "0.25"), ("float", "0.125")) is None  # lifted
    assert steady(("bool", True), ("bool", False), ("bool", True)) is None
    assert steady((1, 2), (1, 2, 3), (1, 2, 3, 4)) is None
    assert matches(pat, _t(9, 16)) and not matches(pat, _t(9, 8))
    assert not matches(("int", ANY), ("bool", True))
    assert steady(_t(4, 16), _t(4, 16), _t(3, 16)) is None  # a smaller last batch
    assert steady(_t(4, 16), _t(3, 16), _t(4, 16)) is None
    assert steady(_t(2, 16), _t(4, 16), _t(5, 16)) is None  # not by the same step


def test_three_steady_steps_teach_the_growing_ops_at_their_positions() -> None:
    g = Growing()
    _feed(g, _step(3))
    _feed(g, [])  # two syncs in a row: no step
    _feed(g, _step(4))
    assert not g.count  # two steps that differ are no evidence of growth
    _feed(g, _step(5))
    assert g.count == 2
    assert _varies(g, _step(9)) == [False] * 4 + [True] * 2 + [False] * 4
    # the same op and shape at another position, or one that differs in a size that did
    # not change, is not taken for a growing one
    later = _step(10)
    assert not g.varies(later[5][0], later[5][1])  # position 0
    g.pos = 5
    assert not g.varies(aten.mm.default, _op(_t(1, 8), _t(8, 16)))


def _at(offset: int, *shape: int) -> tuple:
    """``_t`` at a storage offset (a view into a bigger tensor, ``x[:, t]``)."""
    kind, (size, stride, _, dtype) = _t(*shape)
    return (kind, (size, stride, offset, dtype))


def _time_step(t: int, length: int | None = None) -> list[tuple]:
    """A recurrence's time step: fixed ops, one reading time step ``t``'s slice of the
    input (its offset moving 768 floats a step, as the zoo GRU's), and with ``length``
    a cat onto a cache of that length too."""
    ops = [(aten.mm.default, _op(_t(8, 32), _t(32, 96)))] * 3 + [
        (aten.add_.Tensor, _op(_t(8, 32), _at(768 * t, 8, 32)))]
    if length is not None:
        ops.append((aten.cat.default, _op(("L", (_t(length, 16), _t(1, 16))), ("int", 0))))
    return ops


def test_steps_in_which_only_offsets_move_teach_nothing_unless_a_size_grows_too() -> None:
    g = Growing()
    for t in (0, 1, 2, 3):
        _feed(g, _time_step(t))
    assert not g.count  # a window walking over a tensor: its shapes come again
    assert _varies(g, _time_step(4)) == [False] * 4
    g = Growing()
    for t in (0, 1, 2):
        _feed(g, _time_step(t, length=3 + t))
    assert g.count == 2  # the offsets moving along a growing cache are learned with it
    assert _varies(g, _time_step(3, length=6)) == [False] * 3 + [True] * 2


def test_steps_that_differ_unsteadily_in_most_ops_or_in_floats_teach_nothing() -> None:
    g = Growing()
    for bs in ((4, 4, 4), (4, 4, 4), (3, 3, 4)):
        _feed(g, [(aten.mm.default, _op(_t(b, 16), _t(16, 16))) for b in bs])
    assert not g.count
    g = Growing()
    for b in (4, 4, 3, 4, 4, 3, 4):  # a smaller last batch, under half of the ops
        _feed(g, [(aten.mm.default, _op(_t(b, 16), _t(16, 16)))] + _step(3)[:4])
    assert not g.count
    g = Growing()
    for n, x in ((3, "0.5"), (4, "0.25"), (5, "0.125")):
        _feed(g, _step(n) + [(aten.mul.Tensor, _op(_t(1, 16), ("float", x)))])
    assert not g.count
    g = Growing()
    _feed(g, _step(3))
    _feed(g, _step(3)[:-1])  # another kind of step in between is remembered apart
    _feed(g, _step(4))
    _feed(g, _step(3)[:-1])
    _feed(g, _step(5))
    assert g.count


def test_a_pattern_is_forgotten_where_its_op_stops_changing() -> None:
    g = Growing()
    for n in (3, 4, 5):
        _feed(g, _step(n))
    assert _varies(g, _step(6))[4:6] == [True, True]
    assert _varies(g, _step(6))[4:6] == [True, True]  # the same ints again: forgotten
    assert not g.count and not g.at
    assert _varies(g, _step(6)) == [False] * 10


def test_layers_share_patterns_and_the_cap_is_counted(monkeypatch) -> None:
    g = Growing()
    for n in (3, 4, 5):
        _feed(g, _step(n, layers=30))
    assert g.count == 2 and all(len(p) == 30 for p in g.patterns.values())
    assert _varies(g, _step(7, layers=30)).count(True) == 60
    monkeypatch.setattr(growing, "_MAX_PATTERNS", 1)
    g = Growing()
    for n in (3, 4, 5):
        _feed(g, _step(n, layers=3))
    assert g.count == 1 and g.reasons["growing-patterns-capped"] == 3
    assert sorted(g.at) == [4, 10, 16]  # no position is left without a pattern


def test_replayed_and_eager_ops_teach_too() -> None:
    """Steps whose fixed ops replay (as the signatures of their region) and whose growing
    ops ran between regions still teach: a second growing op found later is learned."""
    g = Growing()
    for n in (3, 4, 5):
        _feed(g, _step(n))
    fixed = tuple(OpSig(f, Static(*s, "single"), (), ()) for f, s in _step(3)[:4])
    for n in (6, 7, 8):
        g.replayed(fixed, 4)
        step = _step(n)
        step[6] = (aten.mm.default, _op(_t(1, 16), _t(16, n)))  # grows from now on
        for f, s in step[4:]:
            (g.ran_between if g.varies(f, s) else g.saw)(f, s)
        g.step_ended()
    assert sorted(g.at) == [4, 5, 6]  # the new one shares the pattern at 5
    g.replayed(fixed, 4)
    step = _step(9)
    step[6] = (aten.mm.default, _op(_t(1, 16), _t(16, 9)))
    for f, s in step[4:]:
        assert g.varies(f, s) == (g.pos in (4, 5, 6))
        g.saw(f, s)


# --- loops, compared to eager on the CPU ------------------------------------------------


def _decoding(steps: int, variant: str, per_step: list) -> Callable[[str], dict]:
    """Greedy decoding with a two-layer decoder: ``window`` keeps the last 6 positions of
    the cache (full after 6 steps: fixed shapes from then on), ``grad`` takes a gradient
    through each step (the backward's ops grow too)."""
    torch.manual_seed(0)
    d, vocab, window = 16, 12, 6
    emb, head, ln_f = nn.Embedding(vocab, d), nn.Linear(d, vocab), nn.LayerNorm(d)
    blocks = [nn.ModuleDict({"ln1": nn.LayerNorm(d), "qkv": nn.Linear(d, 3 * d),
                             "proj": nn.Linear(d, d), "fc": nn.Linear(d, 2 * d),
                             "out": nn.Linear(2 * d, d)}) for _ in range(2)]

    def loop(device: str) -> dict:
        e, h, lf = emb.to(device), head.to(device), ln_f.to(device)
        bs = [b.to(device) for b in blocks]
        with torch.enable_grad() if variant == "grad" else torch.no_grad():
            tok = torch.tensor([[3]]).to(device)
            cache = [(torch.zeros(1, 0, d, device=device),) * 2 for _ in bs]
            tokens, logits, grads = [], [], []
            for _ in range(steps):
                before = ae.stats() if ae.is_enabled() else None
                x = e(tok)
                for i, b in enumerate(bs):
                    q, k, v = b["qkv"](b["ln1"](x)).split(d, dim=-1)
                    keys = torch.cat([cache[i][0], k], 1)
                    values = torch.cat([cache[i][1], v], 1)
                    if variant == "window":
                        keys, values = keys[:, -window:], values[:, -window:]
                    cache[i] = (keys, values)
                    att = torch.softmax(q @ keys.transpose(1, 2) * d ** -0.5, -1) @ values
                    x = x + b["proj"](att)
                    x = x + b["out"](F.gelu(b["fc"](x)))
                out = h(lf(x))[:, -1]
                if variant == "grad":
                    cache = [(k_.detach(), v_.detach()) for k_, v_ in cache]
                    g, = torch.autograd.grad(out.logsumexp(-1).sum(), e.weight)
                    grads.append(g.sum().reshape(1).detach())
                    out = out.detach()
                tok = out.argmax(-1, keepdim=True)
                logits.append(out)
                tokens.append(tok.item())
                if before is not None:
                    after = ae.stats()
                    per_step.append(tuple(after[k] - before[k] for k in (
                        "ops_deferred", "ops_recorded", "ops_between_regions")))
        r = {"tokens": torch.tensor(tokens), "logits": torch.cat(logits), "keys": cache[-1][0]}
        if grads:
            r["grads"] = torch.cat(grads)
        return r

    return loop


def test_sliding_window_cache_replays_whole_steps_once_full() -> None:
    """Once the window is full the shapes stop growing: the patterns are forgotten and
    late steps replay whole (none of their ops recorded or run between regions)."""
    per_step: list = []
    loop = _decoding(16, "window", per_step)
    cpu = run(loop, "cpu")
    ae.reset()
    adaptive = run(loop, "neuron", adaptive=True)
    assert_same(cpu, adaptive, rtol=1e-4, atol=1e-5, exact=("tokens",))
    assert all(s[1] == s[2] == 0 for s in per_step[-3:]), (per_step, ae.explain())


def test_decoding_with_gradients_keeps_learning() -> None:
    """Once the first patterns are learned no step is recorded whole any more; the growing
    ops of the backward, found later, are still learned from steps that partly replay."""
    per_step: list = []
    loop = _decoding(8, "grad", per_step)
    cpu = run(loop, "cpu")
    ae.reset()
    adaptive = run(loop, "neuron", adaptive=True)
    assert_same(cpu, adaptive, rtol=1e-4, atol=1e-5, exact=("tokens",))
    deferred, recorded, between = per_step[-1]
    assert recorded * 10 < deferred + recorded + between, (per_step, ae.explain())


def test_training_with_a_smaller_last_batch_learns_no_growth() -> None:
    """Batches 4, 4, 3 each epoch: the steps differ, but nothing grows steadily, so no op
    runs between regions (the smaller batch is a variant)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 4))
    xs, ys = torch.randn(33, 8), torch.randn(33, 4)

    def loop(device: str) -> dict:
        m = clone_to(model, device)
        opt = torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9, foreach=False)
        losses, i = [], 0
        for _ in range(3):
            for b in (4, 4, 3):
                loss = F.mse_loss(m(xs[i:i + b].to(device)), ys[i:i + b].to(device),
                                  reduction="sum")
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                i += b
        return {"losses": torch.tensor(losses), **{k: v.detach().clone()
                                                   for k, v in m.state_dict().items()}}

    cpu = run(loop, "cpu")
    ae.reset()
    adaptive = run(loop, "neuron", adaptive=True)
    assert_same(cpu, adaptive, rtol=1e-4, atol=1e-5)
    assert ae.stats()["ops_between_regions"] == 0, ae.explain()


def test_the_pattern_cap_is_a_reason_in_stats_and_explain(monkeypatch) -> None:
    monkeypatch.setattr(growing, "_MAX_PATTERNS", 1)
    loop = _decoding(8, "plain", [])
    cpu = run(loop, "cpu")
    ae.reset()
    adaptive = run(loop, "neuron", adaptive=True)
    assert_same(cpu, adaptive, rtol=1e-4, atol=1e-5, exact=("tokens",))
    assert ae.stats()["fallback_reasons"].get("growing-patterns-capped", 0) > 0
    assert "growing-patterns-capped" in ae.explain()


def test_an_endless_step_is_kept_no_further(monkeypatch) -> None:
    """A stream that never syncs is one step: its ops are not all kept, nor learned from."""
    monkeypatch.setattr(growing, "_MAX_STEP_OPS", 8)
    g = Growing()
    for n in (3, 4, 5):
        for f, s in _step(n) * 3:
            g.saw(f, s)
        assert len(g.chunks) == 8 and g.pos == 30
        g.step_ended()
    assert not g.count and not g.prev
