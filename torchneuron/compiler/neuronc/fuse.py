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

from torchneuron.hardware import HardwareProfile

from ._footprint import footprint
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
    """Op -> group id, with the group graph derived on demand (programs are small)."""

    def __init__(self, program: Program, profile: HardwareProfile) -> None:
        fn = program.function
        self.body = fn.body
        self.defs = definitions(fn)
        self.users = users(fn)
        self.types = value_types(fn)
        self.profile = profile
        self.group_of: dict[int, int] = {}
        self.members: dict[int, list[int]] = {}

    def new(self, i: int) -> int:
        self.group_of[i] = i
        self.members[i] = [i]
        return i

    def preds(self, g: int) -> set[int]:
        out: set[int] = set()
        for i in self.members[g]:
            for v in all_operands(self.body[i]):
                d = self.defs.get(v)
                if d is not None and d in self.group_of and self.group_of[d] != g:
                    out.add(self.group_of[d])
        return out

    def reaches_via_other(self, src: int, dst: int) -> bool:
        """Is there a path src -> X -> ... -> dst through some group X not src or dst?"""
        stack = [p for p in self.preds(src) if p != dst]
        seen = set(stack)
        while stack:
            g = stack.pop()
            for p in self.preds(g):
                if p == dst:
                    return True
                if p not in seen and p != src:
                    seen.add(p)
                    stack.append(p)
        return False

    def legal(self, a: int, b: int) -> bool:
        ops = self.members[a] + self.members[b]
        kinds = [kind(self.body[i]) for i in ops]
        if "isolated" in kinds or kinds.count("contraction") > 1:
            return False
        if self.reaches_via_other(a, b) or self.reaches_via_other(b, a):
            return False
        fp = footprint(self.body, sorted(ops), self.users, self.types, self.profile)
        return fp.streamed_sbuf <= self.profile.sbuf_bytes

    def merge(self, into: int, other: int) -> None:
        for i in self.members.pop(other):
            self.group_of[i] = into
            self.members[into].append(i)
        self.members[into].sort()


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


def _topological(groups: dict[int, list[int]], g: _Groups) -> list[int]:
    """Kernel order: dependencies first, ties by first op index (deterministic)."""
    preds = {k: g.preds(k) for k in groups}
    done: set[int] = set()
    order: list[int] = []
    while len(order) < len(groups):
        ready = [k for k in groups if k not in done and preds[k] <= done]
        nxt = min(ready, key=lambda k: groups[k][0])
        done.add(nxt)
        order.append(nxt)
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
                g.merge(target, p)
    kernels: list[Kernel] = []
    seen: dict[str, int] = {}
    for gid in _topological(g.members, g):
        ops = g.members[gid]
        name = kernel_name([short(g.body[i].name) for i in ops])
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}_{seen[name]}"
        kind_ = kernel_kind([kind(g.body[i]) for i in ops])
        kernels.append(Kernel(name=name, op_indices=list(ops), kind=kind_))
    fused_away = sum(len(k.op_indices) for k in kernels) - len(kernels)
    out = program.with_body(list(g.body), fused_ops=fused_away)
    out.kernels = kernels
    return out
