"""Learning which ops grow from step to step (``growing``), without tensors."""

from __future__ import annotations

import torch

from torchneuron.adaptive_eager.growing import ANY, Growing, matches, wildcard

aten = torch.ops.aten


def _t(*shape: int) -> tuple:
    """The static description of a contiguous f32 tensor argument (as ``static_of``)."""
    strides = tuple(int(torch.empty(shape).stride(i)) for i in range(len(shape)))
    return ("T", (shape, strides, 0, torch.float32))


def _op(*args: tuple) -> tuple:
    return (("U", (("U", args), ("K", ()))), False, False)


def _step(length: int) -> list[tuple]:
    """A decoding step: fixed projections around a cat onto a cache of ``length``."""
    fixed = [(aten.mm.default, _op(_t(1, 16), _t(16, 16)))] * 4
    return fixed + [
        (aten.cat.default, _op(("L", (_t(length, 16), _t(1, 16))), ("int", 0))),
        (aten.mm.default, _op(_t(1, 16), _t(16, length + 1))),
    ] + fixed


def test_wildcard_replaces_only_ints_that_differ() -> None:
    assert wildcard(_t(3, 16), _t(4, 16)) == ("T", ((ANY, 16), (16, 1), 0, torch.float32))
    assert wildcard(("float", "0.5"), ("float", "0.25")) is None  # floats are lifted instead
    assert wildcard(("bool", True), ("bool", False)) is None
    assert wildcard((1, 2), (1, 2, 3)) is None
    pat = wildcard(_t(3, 16), _t(4, 16))
    assert matches(pat, _t(9, 16)) and not matches(pat, _t(9, 8))
    assert not matches(("int", ANY), ("bool", True))


def test_two_steps_teach_the_growing_ops_at_their_positions() -> None:
    g = Growing()
    g.step_ended(_step(3))
    assert not g.active
    g.step_ended([])  # two syncs in a row: no step, nothing forgotten
    g.step_ended(_step(4))
    assert g.active
    later = _step(9)
    assert [g.varies(i, f, s) for i, (f, s) in enumerate(later)] == [False] * 4 + [True] * 2 + [False] * 4
    # the same op and shape at another position, or one that differs in a size that did
    # not change, is not taken for a growing one
    assert not g.varies(0, later[5][0], later[5][1])
    assert not g.varies(5, aten.mm.default, _op(_t(1, 8), _t(8, 16)))


def test_steps_that_differ_in_most_ops_or_in_floats_teach_nothing() -> None:
    g = Growing()
    g.step_ended([(aten.mm.default, _op(_t(b, 16), _t(16, 16))) for b in (4, 4, 4)])
    g.step_ended([(aten.mm.default, _op(_t(b, 16), _t(16, 16))) for b in (3, 3, 4)])
    assert not g.active  # a varying batch: variants, not ops between regions
    g = Growing()
    g.step_ended(_step(3) + [(aten.mul.Tensor, _op(_t(1, 16), ("float", "0.5")))])
    g.step_ended(_step(4) + [(aten.mul.Tensor, _op(_t(1, 16), ("float", "0.25")))])
    assert not g.active
    g = Growing()
    g.step_ended(_step(3))
    g.step_ended(None)  # a step that was not recorded whole
    g.step_ended(_step(3)[:-1])  # another kind of step in between is remembered apart
    g.step_ended(_step(4))
    assert g.active
