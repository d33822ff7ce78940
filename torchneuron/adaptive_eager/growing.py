"""Ops whose shapes change every step (a growing KV cache) run eagerly between regions.

Greedy decoding with a KV cache appends one position per step: the ``cat`` onto the cache,
``q @ k^T``, the softmax over keys and ``attn @ v`` have a new shape each step, so a step
never repeats and no region made of whole steps ever gets hot. Most ops of a step have
fixed shapes, though (embeddings, layer norms, projections, the MLP, the logits). Two
consecutive steps that are the same ops in the same order and differ only in integers
(sizes, strides, offsets, int arguments such as ``arange``'s bounds) at a minority of
positions show which ops vary: each such op becomes a *pattern*, its signature with the
integers that changed replaced by a wildcard, kept with its position in the step (ops since
the last boundary, however they ran). From then on an op at that position matching the
pattern ends the segment (closing the fixed-shape ops before it as a region) and runs eagerly, outside
any region; the fixed-shape pieces between such ops are ordinary regions, found hot in the
next steps, compiled, and replayed (identical layers share one). The growing ops cost what
eager costs; nothing is compiled for a shape that will not come again. The position is
what tells ``q`` of shape ``[1, 1, 16]`` (fixed) from the scores ``[1, 1, L]`` at L = 16:
the wildcard alone would match both.

Only integers may differ: a float (lifted instead, see ``lift``), a dtype or a different
op sequence teaches nothing. Every decision is made from the op stream alone, so the step
that first replays is the same on every run. A pattern never changes a result: it only
moves the boundaries of regions (an op that matches it runs eagerly, as without adaptive
eager).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Growing", "ANY", "wildcard", "matches"]

_MAX_PATTERNS = 256  # patterns kept; past this, no more are learned
_KEEP_STEPS = 8  # whole steps remembered, one per (length, first op)


class _Any:
    """The wildcard: stands for any int (never a bool) in a pattern."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "*"


ANY = _Any()


def wildcard(a: Any, b: Any) -> Any:
    """The pattern that matches both descriptions, with every int that differs (or is
    already ``ANY``) as ``ANY``; None if they differ in anything else (a float, a dtype,
    a structure)."""
    if a is ANY:
        return ANY if type(b) is int or b is ANY else None
    if type(a) is tuple:
        if type(b) is not tuple or len(a) != len(b):
            return None
        if a == b:
            return a
        parts = []
        for x, y in zip(a, b, strict=True):
            w = wildcard(x, y)
            if w is None:
                return None
            parts.append(w)
        return tuple(parts)
    if a == b and type(a) is type(b):
        return a
    if type(a) is int and type(b) is int:
        return ANY
    return None


def matches(pattern: Any, desc: Any) -> bool:
    """Whether ``desc`` is ``pattern`` with some int in place of each ``ANY``."""
    if pattern is ANY:
        return type(desc) is int
    if type(pattern) is tuple:
        if type(desc) is not tuple or len(desc) != len(pattern):
            return False
        for p, d in zip(pattern, desc, strict=True):
            if not matches(p, d):
                return False
        return True
    return pattern == desc and type(pattern) is type(desc)


class Growing:
    """The patterns of ops whose shapes change from step to step, learned from whole
    steps (boundary to boundary, every op recorded); ``active`` once there is one."""

    def __init__(self) -> None:
        # position in the step -> (op overload, pattern of its static) learned there
        self.patterns: dict[int, list[tuple[Any, tuple]]] = {}
        self.count = 0
        self.active = False
        # the last whole step of each (length, first op): steps may alternate with others
        # (a read of each step's output to the host is a step of its own)
        self.prev: dict[tuple[int, Any], list[tuple[Any, tuple]]] = {}
        self.ran_in_step = 0  # ops run between regions since the last boundary
        self.exited_in_step = 0  # ops run eagerly at side exits since the last boundary

    def varies(self, pos: int, func: Any, static: tuple) -> bool:
        """Whether the op at position ``pos`` of the step (overload, static signature
        from ``recorder.static_of``) is one whose shapes change every step."""
        pats = self.patterns.get(pos)
        if pats is None:
            return False
        for f, p in pats:
            if f is func and matches(p, static):
                return True
        return False

    def step_ended(self, ops: Sequence[tuple[Any, tuple]] | None) -> None:
        """A step ended at a boundary; ``ops`` are its (overload, static) pairs when it
        was recorded whole, else None. Two whole steps in a row that differ only in
        integers at no more than half of their positions teach the varying ops. A step
        without ops (two syncs in a row) is no step."""
        self.ran_in_step = self.exited_in_step = 0
        if not ops:
            return
        ops = list(ops)
        key = (len(ops), ops[0][0])
        prev = self.prev.pop(key, None)
        self.prev[key] = ops
        if len(self.prev) > _KEEP_STEPS:
            del self.prev[next(iter(self.prev))]  # the least recently seen
        if prev is None:
            return
        found = []
        for pos, ((fa, sa), (fb, sb)) in enumerate(zip(prev, ops, strict=True)):
            if fa is not fb:
                return
            if sa == sb:
                continue
            pat = wildcard(sa, sb)
            if pat is None:
                return
            found.append((pos, fa, pat))
        if not found or 2 * len(found) > len(ops):
            return
        for pos, func, pat in found:
            pats = self.patterns.setdefault(pos, [])
            if (func, pat) in pats or self.count >= _MAX_PATTERNS:
                continue
            pats.append((func, pat))
            self.count += 1
            self.active = True
