"""Back-to-back repeats in the op stream: the layers of a model, found by their signatures.

A training step of a model built from N identical blocks (the layers of a transformer)
runs the block's forward N times back to back, and its backward N times back to back (in
reverse order of layers, but each layer's backward is the same ops). Compiled as one
region, the step compiles the block N times; split into the repeated block (one region,
replayed N times) and the pieces between, it compiles the block once.

This module is pure and knows nothing of tensors: it works on a list of per-op keys
(hashable; equal keys stand for equal op signatures without the dataflow) and leaves
the checks it cannot make (the dataflow is the same in every copy, the split pays off)
to a callback. A *tandem repeat* ``Repeat(start, period, copies)`` is the window
``[start, start + period * copies)`` made of ``copies >= 2`` consecutive blocks of
``period`` ops with equal keys. Every choice is made by positions and lengths, never by
the keys' values, so the result does not depend on hash values.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Repeat", "tandem_repeats", "run_start", "split"]


@dataclass(frozen=True)
class Repeat:
    """``copies`` back-to-back blocks of ``period`` ops from ``start`` (a plain piece of
    the stream when ``copies == 1``)."""

    start: int
    period: int
    copies: int

    @property
    def end(self) -> int:
        return self.start + self.period * self.copies


def _codes(keys: Sequence[Hashable], lo: int, hi: int) -> np.ndarray:
    """Small integers standing for ``keys[lo:hi]``, equal where the keys are equal
    (numbered in order of first appearance, so nothing depends on hash values)."""
    ids: dict[Hashable, int] = {}
    return np.fromiter((ids.setdefault(k, len(ids)) for k in keys[lo:hi]), dtype=np.int64,
                       count=hi - lo)


def tandem_repeats(keys: Sequence[Hashable], lo: int, hi: int, min_period: int) -> list[Repeat]:
    """The maximal tandem repeats of ``keys[lo:hi]`` with a period of at least
    ``min_period``, best first: most ops covered, then the shortest period, then the
    leftmost start.

    For each period p, ``keys[i] == keys[i + p]`` holding for a run of L >= p consecutive
    positions from i means ``L // p + 1`` copies of the block at i. Whole runs only: the
    copies start where the run starts (a shifted alignment covers no more ops).

    Remembered per window of keys (a pure function of them): a training loop splits the
    same step's keys at every step while it records, and the search costs a few numpy
    calls per candidate period, hundreds per step."""
    window = (tuple(keys[lo:hi]), min_period)
    found = _found.get(window)
    if found is None:
        if len(_found) >= _FOUND_KEPT:
            _found.clear()
        found = _found[window] = tuple(_search(keys, lo, hi, min_period))
    if lo == 0:
        return list(found)
    return [Repeat(lo + r.start, r.period, r.copies) for r in found]


_FOUND_KEPT = 256
_found: dict[tuple, tuple[Repeat, ...]] = {}  # (window's keys, min period) -> repeats at 0


def _search(keys: Sequence[Hashable], lo: int, hi: int, min_period: int) -> list[Repeat]:
    """``tandem_repeats`` of ``keys[lo:hi]``, with starts counted from ``lo`` (0 is ``lo``):
    the order (by start last) is the same either way."""
    a = _codes(keys, lo, hi)
    n = len(a)
    found: list[Repeat] = []
    for p in range(min_period, n // 2 + 1):
        eq = a[:-p] == a[p:]
        if np.count_nonzero(eq) < p:
            continue
        edges = np.flatnonzero(np.diff(np.concatenate(([0], eq.view(np.int8), [0]))))
        for s, e in zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True):
            if e - s >= p:
                found.append(Repeat(s, p, (e - s) // p + 1))
    found.sort(key=lambda r: (-r.period * r.copies, r.period, r.start))
    return found


def run_start(keys: Sequence[Hashable], end: int, period: int) -> int:
    """The leftmost i with ``keys[j] == keys[j + period]`` for every j in
    ``[i, end - period)``: where a stream that repeats with ``period`` up to ``end``
    started repeating."""
    i = end - period
    while i > 0 and keys[i - 1] == keys[i - 1 + period]:
        i -= 1
    return i


def split(keys: Sequence[Hashable], lo: int, hi: int, min_period: int,
          accept: Callable[[Repeat, int, int], Repeat | None],
          max_tries: int = 16) -> list[Repeat]:
    """``keys[lo:hi]`` as consecutive pieces: tandem repeats and the plain pieces
    between them (``copies == 1``), in stream order.

    The best tandem repeat of the window that ``accept(repeat, lo, hi)`` takes (it may
    return fewer copies, or ``None`` to refuse) becomes a piece; the windows left and
    right of it are split the same way. At most ``max_tries`` candidates are offered
    per window."""
    if hi - lo < 2 * min_period:
        return [Repeat(lo, hi - lo, 1)] if hi > lo else []
    chosen = None
    for cand in tandem_repeats(keys, lo, hi, min_period)[:max_tries]:
        chosen = accept(cand, lo, hi)
        if chosen is not None and chosen.copies >= 2:
            break
        chosen = None
    if chosen is None:
        return [Repeat(lo, hi - lo, 1)]
    return (split(keys, lo, chosen.start, min_period, accept, max_tries) + [chosen]
            + split(keys, chosen.end, hi, min_period, accept, max_tries))
