"""Fusion: greedy producer-consumer grouping of ops into kernels.

Why: each kernel boundary costs an HBM round trip of the values crossing it and a
fixed DMA start. Walking ops in program order, an op joins the kernels of its
producers when the union stays a legal kernel:

- elementwise, broadcast, convert, reshape, transpose, slice/pad/concatenate fuse with
  anything (chains, matmul epilogues and prologues, reduction prologues/epilogues);
- at most one dot_general/convolution per kernel (its epilogue rides on PSUM drain);
- gather/scatter/sort/while/custom calls and unknown ops are kernels of their own;
- no cycle between kernels (merging A and B is illegal if a path A -> X -> B exists);
- the streamed working set must fit SBUF (``_footprint``); past that, fusion would only
  turn HBM round trips into spills, so it stops.

A value used outside its kernel becomes a kernel output (written once, never
recomputed). With fusion disabled (``options={"fuse": False}``) this pass still runs
and makes one kernel per op, so later passes see the same structure.
"""

from __future__ import annotations

import heapq
import math

from torchneuron.compiler.stablehlo import Operation
from torchneuron.hardware import HardwareProfile

from ._footprint import footprint, splat_values
from ._ops import (
    LAYOUT,
    all_operands,
    definitions,
    is_compute,
    kind,
    short,
    users,
    value_types,
)
from .program import Kernel, Program

MAX_NAME_PARTS = 5


class _Groups:
    """Op -> group id, with the group graph kept incrementally.

    Each group caches its op-index range (to prune path searches: a group whose last op
    precedes ``dst``'s first op cannot lead to ``dst``), its producer/consumer groups,
    and an upper bound of its streamed SBUF bytes (the sum of its parts' bounds is an
    upper bound of the union's, unless the union newly needs whole rows; only then, or
    when the bound exceeds SBUF, is the footprint recomputed exactly).
    """

    def __init__(self, program: Program, profile: HardwareProfile) -> None:
        fn = program.function
        self.body = fn.body
        self.defs = definitions(fn)
        self.users = users(fn)
        self.types = value_types(fn)
        self.splats = splat_values(fn.body)
        self.profile = profile
        self.group_of: dict[int, int] = {}
        self.members: dict[int, list[int]] = {}
        self.preds: dict[int, set[int]] = {}
        self.succs: dict[int, set[int]] = {}
        self.lo: dict[int, int] = {}
        self.hi: dict[int, int] = {}
        self.whole_rows: dict[int, bool] = {}
        self.bound: dict[int, int] = {}
        # per-group facts for O(1) legality: contraction count, isolated flag, first
        # reduce index, last non-reduce index (whole rows iff first_reduce < last_other)
        self.n_dot: dict[int, int] = {}
        self.isolated: dict[int, bool] = {}
        self.first_reduce: dict[int, float] = {}
        self.last_other: dict[int, float] = {}

    def new(self, i: int) -> int:
        """Make op ``i`` a group of its own, wired to its producers' groups."""
        self.group_of[i] = i
        self.members[i] = [i]
        self.lo[i] = self.hi[i] = i
        self.preds[i] = set()
        self.succs[i] = set()
        for v in all_operands(self.body[i]):
            d = self.defs.get(v)
            if d is not None and d in self.group_of:
                p = self.group_of[d]
                self.preds[i].add(p)
                self.succs[p].add(i)
        k = kind(self.body[i])
        self.n_dot[i] = int(k == "contraction")
        self.isolated[i] = k == "isolated"
        self.first_reduce[i] = i if k == "reduce" else math.inf
        self.last_other[i] = -math.inf if k == "reduce" else i
        self.whole_rows[i] = False
        self.bound[i] = self._exact([i])
        return i

    def _exact(self, ops: list[int]) -> int:
        """Streamed SBUF bytes of ``ops`` as one kernel (the same rule allocate uses)."""
        fp = footprint(self.body, ops, self.users, self.types, self.profile, self.splats)
        return fp.streamed_sbuf

    def reaches_via_other(self, src: int, dst: int) -> bool:
        """Is there a path src -> X -> ... -> dst through some group X not src or dst?"""
        floor = self.lo[dst]
        stack = [p for p in self.preds[src] if p != dst and self.hi[p] > floor]
        seen = set(stack)
        while stack:
            g = stack.pop()
            for p in self.preds[g]:
                if p == dst:
                    return True
                if p not in seen and p != src and self.hi[p] > floor:
                    seen.add(p)
                    stack.append(p)
        return False

    def legal(self, a: int, b: int) -> bool:
        """May groups a and b become one kernel? (see the module docstring for the rules)"""
        if self.isolated[a] or self.isolated[b] or self.n_dot[a] + self.n_dot[b] > 1:
            return False
        if self.reaches_via_other(a, b) or self.reaches_via_other(b, a):
            return False
        bound = self.bound[a] + self.bound[b]
        whole = min(self.first_reduce[a], self.first_reduce[b]) < max(
            self.last_other[a], self.last_other[b]
        )
        if bound > self.profile.sbuf_bytes or (
            whole and not (self.whole_rows[a] and self.whole_rows[b])
        ):
            bound = self._exact(sorted(self.members[a] + self.members[b]))
        self._pending = (bound, whole)
        return bound <= self.profile.sbuf_bytes

    def merge(self, into: int, other: int) -> int:
        """Unite two groups (right after ``legal``); returns the surviving id.

        The smaller group moves into the larger, so long chains merge in linear time.
        """
        if len(self.members[other]) > len(self.members[into]):
            into, other = other, into
        self.bound[into], self.whole_rows[into] = self._pending
        for i in self.members.pop(other):
            self.group_of[i] = into
            self.members[into].append(i)
        self.n_dot[into] += self.n_dot.pop(other)
        self.isolated[into] = self.isolated[into] or self.isolated.pop(other)
        self.first_reduce[into] = min(self.first_reduce[into], self.first_reduce.pop(other))
        self.last_other[into] = max(self.last_other[into], self.last_other.pop(other))
        self.lo[into] = min(self.lo[into], self.lo.pop(other))
        self.hi[into] = max(self.hi[into], self.hi.pop(other))
        for p in self.preds.pop(other):
            self.succs[p].discard(other)
            if p != into:
                self.succs[p].add(into)
                self.preds[into].add(p)
        for c in self.succs.pop(other):
            self.preds[c].discard(other)
            if c != into:
                self.preds[c].add(into)
                self.succs[into].add(c)
        self.preds[into].discard(other)
        self.succs[into].discard(other)
        del self.bound[other], self.whole_rows[other]
        return into


def kernel_kind(kinds: list[str]) -> str:
    """The kernel's dominant category, for reports and the scheduler."""
    for k in ("isolated", "contraction", "reduce"):
        if k in kinds:
            return k
    return "elementwise" if "elementwise" in kinds else "data"


def kernel_name(names: list[str]) -> str:
    """Readable name from the ops' names, e.g. ``fused_dot_general_add_logistic``."""
    parts: list[str] = []
    compute = [n for n in names if n not in LAYOUT and n != "convert"] or names
    for n in compute:
        if not parts or parts[-1] != n:
            parts.append(n)
    if len(names) == 1:
        return names[0]
    tail = "_etc" if len(parts) > MAX_NAME_PARTS else ""
    return "fused_" + "_".join(parts[:MAX_NAME_PARTS]) + tail


def _label(op: Operation) -> str:
    """An op's part of its kernel's name: a custom call is named by its target
    (``nki.nki_lib.flash_attention_fwd``), everything else by its short name."""
    target = op.attributes.get("call_target_name") if short(op.name) == "custom_call" else None
    return str(target) if isinstance(target, str) and target else short(op.name)


def _topological(g: _Groups) -> list[int]:
    """Kernel order: dependencies first, ties by first op index (deterministic)."""
    waiting = {k: len(g.preds[k]) for k in g.members}
    ready = [(g.lo[k], k) for k, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(k)
        for c in sorted(g.succs[k]):
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, (g.lo[c], c))
    assert len(order) == len(g.members), "fusion produced a cycle between kernels"
    return order


def run(program: Program, profile: HardwareProfile, enabled: bool = True) -> Program:
    """Group the entry function's compute ops into kernels (one per op if not enabled)."""
    g = _Groups(program, profile)
    for i, op in enumerate(g.body):
        if not is_compute(op):
            continue
        target = g.new(i)
        if not enabled or kind(op) == "isolated":
            continue
        producers = sorted(
            {g.group_of[g.defs[v]] for v in op.operands if g.defs.get(v) in g.group_of}
        )
        for p in producers:
            if p in g.members and p != target and g.legal(target, p):
                target = g.merge(target, p)
    kernels: list[Kernel] = []
    seen: dict[str, int] = {}
    for gid in _topological(g):
        ops = sorted(g.members[gid])
        name = kernel_name([_label(g.body[i]) for i in ops])
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}_{seen[name]}"
        kind_ = kernel_kind([kind(g.body[i]) for i in ops])
        kernels.append(Kernel(name=name, op_indices=list(ops), kind=kind_))
    fused_away = sum(len(k.op_indices) for k in kernels) - len(kernels)
    out = program.with_body(list(g.body), fused_ops=fused_away)
    out.kernels = kernels
    return out
