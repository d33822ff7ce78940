"""Ops whose shapes change every step (a growing KV cache) run eagerly between regions.

Greedy decoding with a KV cache appends one position per step: the ``cat`` onto the cache,
``q @ k^T``, the softmax over keys and ``attn @ v`` have a new shape each step, so a step
never repeats and no region made of whole steps ever gets hot. Most ops of a step have
fixed shapes, though (embeddings, layer norms, projections, the MLP, the logits).

Learning. Every step (boundary to boundary) is kept as its list of (op, signature), however
each op ran: recorded, replayed (the signatures of the region), side-exited, or between
regions. Three consecutive steps of the same kind (same length and first op) that are the
same ops in the same order and differ only in integers, at no more than half of their
positions, where every integer that changes changes by the same nonzero amount from the
first step to the second and from the second to the third, show which ops grow: each such
op becomes a *pattern*, its signature with those integers replaced by a wildcard, tied to
the positions in the step (ops since the boundary) where it was seen.

Why three steps and a steady change: two steps that merely differ are no evidence of
growth. A training loop whose last batch is smaller differs from the step before in half
its ops, but its sizes go 4, 4, 3 (or 4, 3, 4): no steady change, so it is left to
variants, as it should be. A cache grows by the same amount every step (sizes L, L+1,
L+2; strides and offsets likewise), so three steps show it. A cache whose capacity doubles
teaches again between doublings, since every step teaches, replayed or not. The price:
the first replay comes a step later than two steps would allow, and a cache that grows by
varying amounts (speculative decoding) is not learned (its ops are recorded, as without
this module).

Forgetting: an op that ran between regions with exactly the signature it had the last time
it ran there has stopped changing (a sliding-window cache once full), so the pattern is
dropped at that position; the op is recorded again and its step can become whole regions
that replay.

Running: an op at a pattern's position matching the pattern ends the segment (closing the
fixed-shape ops before it as a region) and runs eagerly, outside any region; the
fixed-shape pieces between such ops are ordinary regions, found hot in the next steps,
compiled, and replayed (identical layers share one). The growing ops cost what eager
costs; nothing is compiled for a shape that will not come again. The position is what
tells ``q`` of shape ``[1, 1, 16]`` (fixed) from the scores ``[1, 1, L]`` at L = 16: the
wildcard alone would match both. A pattern is stored once with the set of its positions
(every layer of a model has the same ones), and at most ``_MAX_PATTERNS`` distinct patterns
are kept; one refused past that is counted as ``growing-patterns-capped``.

Lengths that come again: a step's growing ops have one exact signature per length (the
cache holds L positions at the L-th token), and a loop that decodes again from the same
prompt length (``generate()`` called once per request) meets the same lengths in the same
order. An op matching a pattern with an exact signature that already ran between regions
at its position, with other signatures there since (``kind`` is ``SEEN``: not the same
length again at once, as the next layer of a step split by syncs, or a cache that stopped
growing), is recorded instead, in a segment of its own: the
segment is cut where the step goes from fixed-shape ops to growing ones and back
(``Runtime.on_op``), so each run of growing ops at one length becomes a region keyed by
that length (its first op's exact signature is its start), hot when that length comes
again, replayed like any other, while the fixed-shape pieces around it stay the shared
regions they were. A length met once (``NEW``) still runs eagerly: nothing is recorded
or compiled for a shape that does not come again. At most ``_MAX_SEEN`` exact signatures
are remembered; past that, growing ops run eagerly as before.

Offsets alone are no growth: three steps whose only moving integers are tensors' storage
offsets (a recurrence's time steps reading ``x[:, t]``, split into steps by the
boundaries inside each time step: the zoo GRU's) walk a fixed-shape window over a
tensor, and the same offsets come again every training step, so their ops are recorded
as any other (``_sized``). A growing cache moves a size or an int argument too, and then
the ops of its steps whose offsets only move are learned with the rest.

Only integers may differ: a float (lifted instead, see ``lift``), a dtype or a different
op sequence teaches nothing. Every decision is made from the op stream alone, so the step
that first replays is the same on every run. A pattern never changes a result: it only
moves the boundaries of regions (an op that matches it runs eagerly, as without adaptive
eager).
"""

from __future__ import annotations

from collections import Counter
from itertools import compress, count
from operator import itemgetter, ne
from typing import Any

from torchneuron.adaptive_eager.reasons import Reason

__all__ = ["Growing", "ANY", "steady", "matches", "matcher", "FIXED", "NEW", "SEEN"]

FIXED, NEW, SEEN = 0, 1, 2  # ``Growing.kind``: no pattern; a length not met; one met before
_MAX_SEEN = 1 << 14  # exact signatures of growing ops remembered (``Growing.seen``)
_MAX_STARTS = 64  # step positions remembered per region (``Growing.started``)

_MAX_PATTERNS = 256  # distinct patterns kept; past this, no more are learned
# ops of a step kept to learn from: a stream that never syncs is one endless step, kept
# no further (it is not learned from)
_MAX_STEP_OPS = 1 << 14
_KEEP_KINDS = 8  # kinds of step (length, first op) whose last steps are remembered
_CAPPED = Reason.GROWING_CAPPED.value  # counted for a pattern refused at the cap



_GIVE_UP = object()  # ``_pattern``: the three steps are not one step growing


def _pattern(fa: Any, fb: Any, fc: Any, sa: Any, sb: Any, sc: Any) -> Any:
    """What one position of three recorded steps says (ops ``f``, arguments ``s``): None
    when the three calls are the same, their steady pattern when only the arguments
    move steadily, else ``_GIVE_UP``."""
    if not (fa is fb is fc):
        return _GIVE_UP
    if sa == sb == sc:
        return None
    key = (id(sa), id(sb), id(sc))
    got = _STEADY.get(key)
    if got is not None and got[0] is sa and got[1] is sb and got[2] is sc:
        return got[3]
    pat = steady(sa, sb, sc)
    if pat is None:
        pat = _GIVE_UP
    if len(_STEADY) >= _STEADY_KEPT:
        _STEADY.clear()
    _STEADY[key] = (sa, sb, sc, pat)
    return pat


# (ids of three arguments) -> (the three, ``_pattern``'s answer for them). Why: a step's
# ops are kept with their interned ``static`` (``Segment.append``), so a loop that learns
# from the same three arguments again (a recurrent loop: the GRU's time steps are steps
# between boundaries, their offsets moving the same way every training step) asks
# ``steady``'s recursion once per triple, not at every step. Kept with the arguments, so
# their ids are not reused while kept; by identity, since arguments equal but for their
# leaves' types (1 and True) have other patterns.
_STEADY: dict[tuple[int, int, int], tuple[Any, Any, Any, Any]] = {}
_STEADY_KEPT = 1 << 12  # answers kept (all forgotten at once past this)

class _Any:
    """The wildcard: stands for any int (never a bool) in a pattern."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "*"


ANY = _Any()


def matches(pattern: Any, desc: Any) -> bool:
    """Whether ``desc`` is ``pattern`` with some int in place of each ``ANY``. A named
    tuple of a signature (``signature.Meta``, ``Call``) is a tuple like any other here."""
    if pattern is ANY:
        return type(desc) is int
    if isinstance(pattern, tuple):
        if not isinstance(desc, tuple) or len(desc) != len(pattern):
            return False
        for p, d in zip(pattern, desc, strict=True):
            if not matches(p, d):
                return False
        return True
    return pattern == desc and type(pattern) is type(desc)


_KEPT = 1 << 12  # answers kept per table of ``_kept`` (all forgotten at once past this)


def _kept(table: dict[int, tuple[Any, Any]], pattern: Any, make: Any) -> Any:
    """``make(pattern)``, kept in ``table`` by the pattern's identity (with the pattern,
    so its id is not reused): patterns equal but for their leaves' types (1 and True)
    must not share an answer."""
    got = table.get(id(pattern))
    if got is not None and got[0] is pattern:
        return got[1]
    answer = make(pattern)
    if len(table) >= _KEPT:
        table.clear()
    table[id(pattern)] = (pattern, answer)
    return answer


_MATCHERS: dict[int, tuple[Any, Any]] = {}  # id(pattern) -> (pattern, its ``matcher``)


def matcher(pattern: Any) -> Any:
    """``matches(pattern, desc)`` as a function of ``desc`` generated once per pattern:
    the same checks in the same order, flat (one line per node of the pattern, no call
    per node). Why: on a recurrent loop (the GRU) the ops at a pattern's positions are
    matched at every step, and ``matches``' recursion was a call per leaf of a
    signature (about 1,400 bytecodes per op)."""
    return _kept(_MATCHERS, pattern, _generate_matcher)


def _generate_matcher(pattern: Any) -> Any:
    consts: list[Any] = []
    lines = ["def m(d):"]
    names = count()

    def walk(pat: Any, x: str) -> None:
        if pat is ANY:
            lines.append(f" if type({x}) is not int: return False")
        elif isinstance(pat, tuple):
            lines.append(f" if not isinstance({x}, tuple) or len({x}) != {len(pat)}: return False")
            if pat:
                parts = [f"x{next(names)}" for _ in pat]
                lines.append(f" {', '.join(parts)}{',' if len(parts) == 1 else ''} = {x}")
                for q, y in zip(pat, parts, strict=True):
                    walk(q, y)
        else:
            k = len(consts)
            consts.append(pat)
            # ``pattern == desc and type(pattern) is type(desc)``
            lines.append(f" if not (c{k} == {x} and type(c{k}) is type({x})): return False")

    walk(pattern, "d")
    lines.append(" return True")
    namespace: dict[str, Any] = {f"c{k}": v for k, v in enumerate(consts)}
    exec(compile("\n".join(lines), "<growing pattern>", "exec"), namespace)  # noqa: S102
    return namespace["m"]


def steady(a: Any, b: Any, c: Any) -> Any:
    """The pattern of three consecutive descriptions in which every int that changes
    changes by the same nonzero amount from ``a`` to ``b`` and from ``b`` to ``c`` (those
    ints as ``ANY``); None if anything else differs, or an int changes unsteadily."""
    if isinstance(a, tuple):
        if a == b == c:
            return a
        if not isinstance(b, tuple) or not isinstance(c, tuple) or not len(a) == len(b) == len(c):
            return None
        parts = []
        for x, y, z in zip(a, b, c, strict=True):
            # what ``steady(x, y, z)`` answers for three equal parts, without its call
            # (a None part is its answer None: the whole is None, as ``steady`` says)
            if x == y == z and x is not None and (isinstance(x, tuple)
                                                   or type(x) is type(y) is type(z)):
                parts.append(x)
                continue
            w = steady(x, y, z)
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


def _sized(pattern: Any) -> bool:
    """Whether a pattern has a wildcard anywhere but in a tensor's storage offset (a size,
    a stride or an int argument). Why: three steps in which only offsets move are one
    loop walking a fixed-shape window over a tensor (a recurrence's time steps reading
    ``x[:, t]``, the zoo GRU's), not a cache that grows: its shapes come again every
    training step, so its ops are recorded like any other. A growing cache always moves
    a size or an int too (the cache's length, the slice's end), and then the ops whose
    offsets only move are learned with them, as before."""
    return _kept(_SIZED, pattern, _has_sized_wildcard)


_SIZED: dict[int, tuple[Any, bool]] = {}  # id(pattern) -> (pattern, ``_sized``'s answer)


def _has_sized_wildcard(pat: Any) -> bool:
    if pat is ANY:
        return True
    if not isinstance(pat, tuple):
        return False
    if len(pat) == 2 and pat[0] == "T" and isinstance(pat[1], tuple) and len(pat[1]) == 4:
        shape, stride, _offset, _dtype = pat[1]  # a tensor: (shape, stride, offset, dtype)
        return _has_sized_wildcard(shape) or _has_sized_wildcard(stride)
    return any(_has_sized_wildcard(p) for p in pat)


# A step is kept as chunks: (region signatures, ops of them that ran, None) for a region
# replayed or side-exited, (None, op overload, static) for an op recorded or run between
# regions.
_Chunk = tuple[Any, Any, Any]


def _ops(chunks: list[_Chunk]) -> list[tuple[Any, Any]]:
    out: list[tuple[Any, Any]] = []
    for sigs, x, static in chunks:
        if sigs is None:
            out.append((x, static))
        else:
            out.extend((sig.func, sig.static.call) for sig in sigs[:x])
    return out


_REGION = itemgetter(0)  # a chunk's region signatures (None: a single op)


def _aligned(a: list[_Chunk], b: list[_Chunk], c: list[_Chunk]) -> bool:
    """Whether three steps ran as the same regions in the same places (only their single
    ops need comparing)."""
    if not len(a) == len(b) == len(c):
        return False
    for x, y, z in zip(a, b, c, strict=True):
        if x[0] is None:
            if y[0] is not None or z[0] is not None:
                return False
        elif not (x[0] is y[0] is z[0] and x[1] == y[1] == z[1]):
            return False
    return True


class Growing:
    """The patterns of ops whose shapes change from step to step, learned from the steps
    seen (however their ops ran), and the current step's position."""

    def __init__(self, reasons: Counter[str] | None = None) -> None:
        # (op overload, pattern of its static) -> positions in the step where it applies
        self.patterns: dict[tuple[Any, Any], set[int]] = {}
        self.at: dict[int, list[tuple[Any, Any]]] = {}  # position -> patterns there
        # position -> (op overload, ``matcher`` of the pattern) of each pattern in ``at``
        self.checks: dict[int, list[tuple[Any, Any]]] = {}
        self.reasons: Counter[str] = reasons if reasons is not None else Counter()
        self.pos = 0  # ops of the current step so far
        self.chunks: list[_Chunk] = []  # the current step
        self.ran: dict[int, tuple] = {}  # position -> static run between regions there
        self.last_ran: dict[int, tuple] = {}  # the same, as last seen at each position
        # position -> (op, exact static) run between regions there: lengths met before
        self.seen: dict[int, set[tuple[Any, tuple]]] = {}
        self.n_seen = 0
        self.run = FIXED  # ``kind`` of the last op recorded this step (a cut between kinds)
        self.starts: dict[str, set[int]] = {}  # region key -> step positions it started at
        # the last (up to) three steps of each (length, id of the first op): steps may alternate
        # with others (a read of each step's output to the host is a step of its own)
        self.prev: dict[tuple[int, int], list[list[_Chunk]]] = {}

    @property
    def count(self) -> int:
        """Distinct patterns kept."""
        return len(self.patterns)

    # --- the op path ----------------------------------------------------------------------
    def varies(self, func: Any, static: tuple) -> bool:
        """Whether the op about to run at the current position of the step (overload,
        static signature from ``recorder.static_of``) is one whose shapes change every
        step."""
        keys = self.checks.get(self.pos)  # (``at``'s patterns, each as its ``matcher``)
        if keys is None:
            return False
        for f, m in keys:
            if f is func and m(static):
                return True
        return False

    def kind(self, func: Any, static: tuple) -> int:
        """FIXED, or for an op whose shapes change every step, NEW (run it eagerly
        between regions) or SEEN (this exact op ran at this position before: a length
        that comes again, recorded in a segment of its own)."""
        if not self.varies(func, static):
            return FIXED
        seen = self.seen.get(self.pos)
        # a length met before, and other lengths since (a new sequence, not the next
        # layer of the same step nor a cache that stopped growing)
        if seen is None or (func, static) not in seen or self.last_ran.get(self.pos) == static:
            return NEW
        self.ran[self.pos] = static  # the last signature here (``last_ran``)
        return SEEN

    def cut(self, kind: int) -> bool:
        """Whether the segment must end before an op of ``kind`` that is about to be
        recorded (the step goes from fixed-shape ops to growing ones, or back)."""
        if kind == self.run:
            return False
        self.run = kind
        return kind == SEEN

    def started(self, key: str, seg_len: int, windows: list[tuple[int, int]]) -> None:
        """Region ``key`` was seen at windows of the current segment (``seg_len`` ops,
        the last of them at the current position): remember the step positions where it
        starts. Why: once a step's growing ops are recorded (``SEEN``), several regions
        keyed by one length can begin with the same op (the slice of the last token,
        taken three times in a decoding step, then cloned, compared, added to), and
        the position tells which one the stream is: without it the longest is tried
        first and exits at its second op, and exits back it off."""
        at = self.starts.setdefault(key, set())
        base = self.pos - seg_len
        for a, _ in windows:
            if len(at) < _MAX_STARTS:
                at.add(base + a)

    def elsewhere(self, key: str) -> bool:
        """Whether region ``key`` was only ever seen starting at other positions of a
        step than the current one (it is then not started here: it is recorded, and so
        learned here, if it is the stream)."""
        at = self.starts.get(key)
        return at is not None and self.pos not in at

    def saw(self, func: Any, static: tuple) -> None:
        """An op was recorded."""
        if self.pos < _MAX_STEP_OPS:
            self.chunks.append((None, func, static))
        self.pos += 1

    def ran_between(self, func: Any, static: tuple) -> None:
        """An op matching a pattern ran eagerly between regions."""
        self.ran[self.pos] = static
        if self.n_seen < _MAX_SEEN:
            where = self.seen.setdefault(self.pos, set())
            if (func, static) not in where:
                where.add((func, static))
                self.n_seen += 1
        if self.pos < _MAX_STEP_OPS:
            self.chunks.append((None, func, static))
        self.pos += 1

    def replayed(self, sigs: tuple, n: int) -> None:
        """The first ``n`` ops of a region (its signatures ``sigs``) were replayed, or
        ran eagerly at a side exit."""
        if n:
            if self.pos < _MAX_STEP_OPS:
                self.chunks.append((sigs, n, None))
            self.pos += n

    # --- the end of a step ----------------------------------------------------------------
    def step_ended(self) -> None:
        """A step ended at a boundary: forget the patterns whose op stopped changing,
        learn from the last three steps of this kind. A step without ops (two syncs in a
        row) is no step."""
        chunks, n = self.chunks, self.pos
        self.chunks, self.pos, self.run = [], 0, FIXED
        if self.ran:
            for pos, static in self.ran.items():
                if self.last_ran.get(pos) == static:
                    self._forget(pos)
                self.last_ran[pos] = static
            self.ran = {}
        if not n or n > _MAX_STEP_OPS:
            return
        first = chunks[0][1] if chunks[0][0] is None else chunks[0][0][0].func
        # (the overload by identity: its hash is a Python call, twice per step; it is
        # kept alive by the steps kept under the key, so its id is its own)
        key = (n, id(first))
        hist = self.prev.pop(key, [])
        hist.append(chunks)
        if len(hist) > 3:
            del hist[0]
        self.prev[key] = hist
        if len(self.prev) > _KEEP_KINDS:
            del self.prev[next(iter(self.prev))]  # the least recently seen
        if len(hist) == 3:
            self._learn(n, *hist)

    def _learn(self, n: int, a: list[_Chunk], b: list[_Chunk], c: list[_Chunk]) -> None:
        if a == b == c:  # the same step three times (compared in C): nothing grows
            return
        found = []
        if len(a) == len(b) == len(c) == n and not (
                any(map(_REGION, a)) or any(map(_REGION, b)) or any(map(_REGION, c))):
            # single ops only (a step recorded): the positions are the chunks', and only
            # where the three differ is there anything to compare (found in C: AdamW's
            # scalars make every step differ from the last in a few ops)
            for pos in sorted({*compress(count(), map(ne, a, b)), *compress(count(), map(ne, b, c))}):
                x, y, z = a[pos], b[pos], c[pos]
                pat = _pattern(x[1], y[1], z[1], x[2], y[2], z[2])
                if pat is _GIVE_UP:
                    return
                if pat is not None:
                    found.append((pos, x[1], pat))
        elif _aligned(a, b, c):  # compare only the single ops
            pos = 0
            for x, y, z in zip(a, b, c, strict=True):
                if x[0] is not None:
                    pos += x[1]
                    continue
                pat = _pattern(x[1], y[1], z[1], x[2], y[2], z[2])
                if pat is _GIVE_UP:
                    return
                if pat is not None:
                    found.append((pos, x[1], pat))
                pos += 1
        else:
            for pos, ((fa, sa), (fb, sb), (fc, sc)) in enumerate(
                    zip(_ops(a), _ops(b), _ops(c), strict=True)):
                pat = _pattern(fa, fb, fc, sa, sb, sc)
                if pat is _GIVE_UP:
                    return
                if pat is not None:
                    found.append((pos, fa, pat))
        if not found or 2 * len(found) > n or not any(_sized(pat) for _, _, pat in found):
            return
        for pos, func, pat in found:
            key = (func, pat)
            where = self.patterns.get(key)
            if where is None:
                if len(self.patterns) >= _MAX_PATTERNS:
                    self.reasons[_CAPPED] += 1
                    continue
                where = self.patterns[key] = set()
            if pos not in where:
                where.add(pos)
                self.at.setdefault(pos, []).append(key)
                self.checks.setdefault(pos, []).append((func, matcher(pat)))

    def _forget(self, pos: int) -> None:
        """The op at ``pos`` showed the same signature in two steps: no pattern applies
        there any more."""
        self.checks.pop(pos, None)
        for key in self.at.pop(pos, ()):
            where = self.patterns[key]
            where.discard(pos)
            if not where:
                del self.patterns[key]
