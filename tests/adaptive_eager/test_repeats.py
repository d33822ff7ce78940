"""The repeat finder (``adaptive_eager/repeats.py``): back-to-back copies of a block in a
list of keys, and the split of a window around them. Pure functions, no device."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from torchneuron.adaptive_eager.repeats import Repeat, run_start, split, tandem_repeats


def _take_all(rep: Repeat, lo: int, hi: int) -> Repeat:
    return rep


def _check_pieces(keys: list, lo: int, hi: int, pieces: list[Repeat]) -> None:
    """Pieces tile [lo, hi) in order, and each repeat's copies have equal keys."""
    pos = lo
    for p in pieces:
        assert p.start == pos and p.period > 0 and p.copies >= 1, pieces
        block = keys[p.start:p.start + p.period]
        for j in range(1, p.copies):
            assert keys[p.start + j * p.period:p.start + (j + 1) * p.period] == block
        pos = p.end
    assert pos == hi, pieces


def test_layers_forward_and_backward_split_out() -> None:
    fwd = [f"f{i}" for i in range(10)]
    bwd = [f"b{i}" for i in range(12)]
    keys = ["emb"] + fwd * 8 + ["head", "loss", "dhead"] + bwd * 8 + ["demb", "opt"]
    pieces = split(keys, 0, len(keys), 8, _take_all)
    _check_pieces(keys, 0, len(keys), pieces)
    assert [(p.period, p.copies) for p in pieces] == [(1, 1), (10, 8), (3, 1), (12, 8), (2, 1)]


def test_best_repeat_covers_most_ops_then_shortest_period() -> None:
    keys = list("xy") + list("abcdefgh") * 4 + list("zz")
    best = tandem_repeats(keys, 0, len(keys), 4)[0]
    assert best == Repeat(2, 8, 4)  # not (16, 2): same ops covered, shorter period


def test_refused_repeat_is_not_split_and_fewer_copies_are_honoured() -> None:
    keys = ["s"] + list("abcdefgh") * 3 + ["t"]
    assert split(keys, 0, len(keys), 8, lambda r, lo, hi: None) == [Repeat(0, len(keys), 1)]
    # the caller found that the third copy's dataflow differs: two copies, then the rest
    pieces = split(keys, 0, len(keys), 8, lambda r, lo, hi: Repeat(r.start, r.period, 2))
    assert pieces == [Repeat(0, 1, 1), Repeat(1, 8, 2), Repeat(17, 9, 1)]


def test_short_blocks_and_windows_are_left_alone() -> None:
    keys = list("abcdefg") * 3  # a block shorter than the minimum, too few for 14
    assert split(keys, 0, len(keys), 8, _take_all) == [Repeat(0, 21, 1)]
    assert split(keys, 3, 3, 8, _take_all) == []
    # a short block's copies make a longer block: whole multiples of its period
    assert split(list("abc") * 6, 0, 18, 8, _take_all) == [Repeat(0, 9, 2)]


def test_run_start_finds_where_a_period_began() -> None:
    keys = list("xyz") + list("abcde") * 5 + list("ab")
    assert run_start(keys, len(keys), 5) == 3
    assert run_start(list("abab"), 4, 2) == 0


@settings(max_examples=60, deadline=None)
@given(pre=st.lists(st.integers(0, 3), max_size=12), post=st.lists(st.integers(0, 3), max_size=12),
       period=st.integers(8, 14), copies=st.integers(2, 6), min_period=st.integers(2, 8))
def test_a_planted_block_is_found_and_pieces_tile_the_window(
        pre: list[int], post: list[int], period: int, copies: int, min_period: int) -> None:
    block = [100 + i for i in range(period)]  # keys found nowhere else
    keys = [-1] + pre + block * copies + post + [-2]
    lo, hi = 1, len(keys) - 1
    pieces = split(keys, lo, hi, min_period, _take_all)
    _check_pieces(keys, lo, hi, pieces)
    repeated = [p for p in pieces if p.copies > 1]
    assert any(p.period == period and p.copies == copies for p in repeated), pieces


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from("abc"), min_size=0, max_size=40), st.integers(0, 6),
       st.integers(1, 4))
def test_remembered_repeats_are_those_of_the_window_wherever_it_lies(
        keys: list, shift: int, min_period: int) -> None:
    """``tandem_repeats`` remembers its answer per window of keys: the same window found
    again at another position (the next step's segment, a piece of a split) gives the
    same repeats moved there, and every repeat it gives is real (its copies are equal)."""
    first = tandem_repeats(keys, 0, len(keys), min_period)
    padded = ["pad"] * shift + keys + ["end"]
    again = tandem_repeats(padded, shift, shift + len(keys), min_period)
    assert again == [Repeat(r.start + shift, r.period, r.copies) for r in first]
    for r in again:
        assert r.period >= min_period and r.copies >= 2
        block = padded[r.start:r.start + r.period]
        for j in range(1, r.copies):
            assert padded[r.start + j * r.period:r.start + (j + 1) * r.period] == block
