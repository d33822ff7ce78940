"""The recorder: the eager op stream as entries, and the segment since the last start point.

Each op that runs eagerly on neuron tensors becomes an ``Entry``: its overload, the static
description of its arguments, the values its tensor arguments are (by a per-wrapper id),
and what each output is: a new value, a view of an argument, or the argument itself (an
in-place op). A *segment* is the run of entries since the last start point (a sync, the
end of a replay, a cut). Windows of a segment become regions: ``relative`` re-expresses a
window's dataflow relative to its start (earlier values of the window, or input slots in
order of first use), which is what a region is keyed and guarded by. A closed segment is
kept as a *trail* of its first op: the next segment that begins with that op is checked
against it op by op and appended by reference where it repeats it (``trail``).
"""

from __future__ import annotations

import bisect
import itertools
import operator
import weakref
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from torchneuron.adaptive_eager.lift import blind_key
from torchneuron.adaptive_eager.signature import (
    Call,
    InputRef,
    Meta,
    NewOut,
    OpSig,
    SameOut,
    Slot,
    Static,
    Unsupported,
    ValueRef,
    ViewOut,
    build,
    describe,
)
from torchneuron.device.tensor import NeuronTensor
from torchneuron.dispatch import run_op
from torchneuron.hardware.settings import get_value

__all__ = ["Entry", "Segment", "vid_of", "known_vid", "static_of", "outputs_of", "run_eagerly", "slot"]

_vids = itertools.count(1)
_NoTorchFunction = torch._C.DisableTorchFunctionSubclass


def vid_of(t: torch.Tensor) -> int:
    """A process-unique id for a tensor wrapper (never reused, unlike ``id``).

    Kept in the wrapper's ``__dict__`` with the ``id`` of the wrapper it was given to:
    ``copy.deepcopy`` copies ``__dict__`` (a frozen target network's buffers would
    otherwise be taken for the live ones), and ``torch.utils.swap_tensors`` swaps it; a
    copied or swapped entry is not this wrapper's, so the wrapper gets a new id (a value
    never seen)."""
    d = t.__dict__
    v = d.get("_ae_vid")
    if v is None or v[1] != id(t):
        v = d["_ae_vid"] = (next(_vids), id(t))
    return v[0]


def known_vid(t: torch.Tensor) -> int | None:
    """``t``'s id if an op has seen this wrapper, else None (see ``vid_of``)."""
    v = t.__dict__.get("_ae_vid")
    return v[0] if v is not None and v[1] == id(t) else None


def static_of(func: Any, args: tuple, kwargs: dict) -> tuple[Call, Any, list[torch.Tensor]]:
    """(static signature, argument template, tensor arguments) of a call; may raise
    ``Unsupported``.

    The same description as ``signature.describe((args, kwargs))``, built in one flat
    loop for the arguments aten ops take (neuron tensors, plain scalars, flat lists of
    them): every recorded op and every guarded op pays this, and the generic recursion
    cost more than the rest of recording. Any other argument goes through ``describe``.

    Below the tensor subclass's ``__torch_function__`` (as ``replay.Replay.try_defer``
    reads metadata): inside a dispatch mode it is on, and each size, stride, offset and
    dtype read of a neuron tensor cost three times the plain C call, with the same answer.
    """
    with _NoTorchFunction():
        tensors: list[torch.Tensor] = []
        adesc, atemp = [], []
        for a in args:
            tp = type(a)
            if tp is NeuronTensor:  # ``_leaf``, inline for the commonest argument
                j = len(tensors)
                tensors.append(a)
                adesc.append(("T", build(Meta, (tuple(a.shape), a.stride(), a.storage_offset(),
                                                a.dtype))))
                atemp.append(_SLOTS[j] if j < _N_SLOTS else Slot(j))
                continue
            d, t = _arg(a, tensors)
            adesc.append(d)
            atemp.append(t)
        if kwargs:
            kdesc, ktemp = [], {}
            for k, a in kwargs.items():
                d, t = _arg(a, tensors)
                kdesc.append((k, d))
                ktemp[k] = t
            kd = ("K", tuple(kdesc))
        else:
            kd, ktemp = _NO_KWARGS, {}
        desc = ("U", (("U", tuple(adesc)), kd))
        return (build(Call, (desc, torch.is_grad_enabled(), torch.is_autocast_enabled())),
                (tuple(atemp), ktemp), tensors)


_NO_KWARGS = ("K", ())
_SCALAR_NAMES = {bool: "bool", int: "int", str: "str", type(None): "NoneType"}
_SLOTS = [Slot(j) for j in range(64)]  # shared: templates only read ``Slot.j``
_N_SLOTS = len(_SLOTS)
_SAMES = [build(SameOut, ("same", j)) for j in range(_N_SLOTS)]  # shared (values, as any)
_OTHER = object()
_INPUTS = [InputRef("x", j) for j in range(256)]  # shared: the refs of a window's input slots
_N_INPUTS = len(_INPUTS)


def slot(j: int) -> Slot:
    """``Slot(j)``, shared for small ``j`` (templates are built per op, per replay)."""
    return _SLOTS[j] if j < len(_SLOTS) else Slot(j)


def _leaf(a: Any, tensors: list[torch.Tensor]) -> tuple[Any, Any]:
    """``describe`` of a tensor or plain scalar, or ``(_OTHER, None)`` for anything else."""
    tp = type(a)
    if tp is NeuronTensor:
        tensors.append(a)
        return (("T", build(Meta, (tuple(a.shape), a.stride(), a.storage_offset(), a.dtype))),
                slot(len(tensors) - 1))
    if tp is float:
        return ("float", repr(a)), a
    name = _SCALAR_NAMES.get(tp)
    if name is not None:
        return (name, a), a
    return _OTHER, None


def _arg(a: Any, tensors: list[torch.Tensor]) -> tuple[Any, Any]:
    """``describe(a, tensors)``, without recursion for flat lists of leaves."""
    d, t = _leaf(a, tensors)
    if d is not _OTHER:
        return d, t
    tp = type(a)
    if tp is list or tp is tuple:
        n = len(tensors)
        ds, ts = [], []
        for x in a:
            d, t = _leaf(x, tensors)
            if d is _OTHER:
                del tensors[n:]
                return describe(a, tensors)
            ds.append(d)
            ts.append(t)
        return ("L" if tp is list else "U", tuple(ds)), (ts if tp is list else tuple(ts))
    return describe(a, tensors)


def outputs_of(result: Any, tensors: list[torch.Tensor]) -> tuple[str, tuple, list]:
    """(structure, output descriptions, output leaves) of an op's result.

    Each output is ``None``, ``SameOut`` (it is a tensor argument), ``ViewOut`` (a view of
    a tensor argument's storage) or ``NewOut`` (a storage of its own). Its metadata is
    read below ``__torch_function__``, as ``static_of`` reads it.
    """
    with _NoTorchFunction():
        tp = type(result)
        if tp is NeuronTensor or isinstance(result, torch.Tensor):
            struct, leaves = "single", [result]
        elif tp is tuple or tp is list or isinstance(result, (tuple, list)):
            struct, leaves = ("list" if isinstance(result, list) else "tuple"), list(result)
        elif result is None:
            struct, leaves = "none", []
        else:
            raise Unsupported(f"result of type {type(result).__name__}")
        outs = []
        ptrs = None
        for r in leaves:
            if r is None:
                outs.append(None)
                continue
            if type(r) is not NeuronTensor and not isinstance(r, NeuronTensor) \
                    or r._buffer is None:
                raise Unsupported("an output that is not a neuron tensor")
            j = 0
            for t in tensors:
                if t is r:
                    outs.append(_SAMES[j] if j < _N_SLOTS else build(SameOut, ("same", j)))
                    break
                j += 1
            else:
                if ptrs is None:  # (a loop: a comprehension is a call)
                    ptrs = []
                    for t in tensors:
                        ptrs.append(t._buffer.untyped_storage().data_ptr())  # type: ignore[union-attr]
                storage = r._buffer.untyped_storage()
                # (an empty storage's pointer is null, as an empty input's is: a new empty
                # result, of any dtype, is no view of an input)
                nbytes = storage.nbytes()
                ptr = storage.data_ptr() if nbytes else -1
                meta = build(Meta, (tuple(r.shape), r.stride(), r.storage_offset(), r.dtype))
                j = 0
                for p in ptrs:
                    if p == ptr:
                        outs.append(build(ViewOut, ("view", meta, j)))
                        break
                    j += 1
                else:
                    outs.append(build(NewOut, ("new", meta, nbytes)))
        return struct, tuple(outs), leaves


def run_eagerly(func: Any, args: tuple, kwargs: dict, tensors: list[torch.Tensor]) -> Any:
    """Run an op being recorded, eagerly, from inside the dispatch mode.

    ``func(*args)`` would dispatch again only to arrive, for an op on neuron tensors and
    no host tensor (what ``static_of`` accepted), at ``NeuronTensor``'s dispatch rule,
    which calls eager dispatch's ``run_op``: calling it directly is the same call without
    a second trip through the dispatcher. An op without a tensor argument (a factory with
    ``device="neuron"``) or with a tensor subclass dispatches as usual.
    """
    if tensors:
        for t in tensors:
            if type(t) is not NeuronTensor:
                break
        else:
            return run_op(func, args, kwargs)
    return func(*args, **kwargs)


class _Alive:
    """Lives exactly as long as the tensor whose ``__dict__`` holds it."""

    __slots__ = ("__weakref__",)


def _alive_token(t: torch.Tensor) -> _Alive:
    """A weakly referenceable stand-in for ``t``'s lifetime. Why not a weakref to ``t``:
    ``torch.utils.swap_tensors`` (``Module.to``) refuses tensors that have weakrefs."""
    token = t.__dict__.get("_ae_alive")
    if token is None:
        token = t.__dict__["_ae_alive"] = _Alive()
    return token


class Entry(NamedTuple):
    """One recorded op: a plain tuple (built without a frame, one object per op)."""

    func: Any
    static: Static  # shared by every entry of the same description (``_op_of``)
    vids: tuple[int, ...]  # the wrapper id of each tensor argument
    outs: tuple  # output descriptions (see ``outputs_of``), shared as ``static`` is
    seq: int  # position in the whole stream
    key: int  # ``lift.blind_key`` of (func, static, outs), found once per distinct op

    def period_key(self) -> int:
        """The hash ``Segment.keys`` compares: found once per distinct op (``_op_of``),
        not per entry nor per search. Blind to floats that could be lifted
        (``lift.blind_key``): AdamW's steps, whose bias corrections change, are periods of
        one stream that never syncs."""
        return self.key


# Interning: the records a recorded op is made of, one object per distinct value.
#
# Why: every step records the same ops again. Built afresh, each op's description (a
# dozen nested tuples), its region-relative ``OpSig`` and the references in it lived until
# the segment closed, so a step left thousands of new container objects alive: the
# garbage collector ran several times per recorded step, walking them all, and every
# later comparison of two steps' signatures went element by element down to the
# shapes. Interned, an op seen before adds no object that outlives it, and two steps'
# signatures are tuples of the same objects (compared by identity first). Values are
# unchanged: an interned record equals (and prints as) the one it stands for.
# (func, call, struct, outs) -> (func, Static, outs, blind key, call, [fast check]): the
# last item is a list, the op's check built once by ``trail.check`` (None: not built yet,
# False: the op has no flat check) and whether the check's template is the tensors in
# order and nothing else (``guard.OpGuard.plain``)
_OPS: dict[tuple, tuple] = {}
_SIGS: dict[tuple, OpSig] = {}  # (ids of func, Static, outs; refs) -> the OpSig of them
_KEPT = 1 << 16  # records kept per table (all forgotten at once past this)
_VREFS: list[list[ValueRef]] = []  # ValueRef("v", i, k) for small i, k, shared
_TRAILS_KEPT = 256  # first ops whose trails are kept (all forgotten at once past this)
_TRAILS_PER_START = 4  # trails kept per first op (segments from it that went on differently)


def _op_of(func: Any, call: tuple, struct: str, outs: tuple) -> tuple:
    """The interned (func, Static, outs, blind key, Call, [check]) of a recorded op."""
    key = (func, call, struct, outs)
    op = _OPS.get(key)
    if op is None:
        if len(_OPS) >= _KEPT:
            _OPS.clear()
        static = build(Static, (*call, struct))
        op = _OPS[key] = (func, static, outs, blind_key(func, static, outs), call,
                               [None, False, None, None])
    return op


def _went_as(ops: list[tuple], mine: list[tuple], n: int) -> bool:
    """Whether a trail's first ``n`` ops are the segment's ``mine``, or differ from them
    only in floats the lifter could lift (their blind keys, ``lift.blind_key``): AdamW's
    update goes on as last step's did, with this step's bias corrections. Only which
    trail is followed depends on it: each op is still checked against the trail's
    exactly (``trail``). Asked only where the trail has no op for the call: where the
    trail's op is the call's but for an argument, the trails alike but for floats are
    last steps' (switching among them at every op cost O(n) per op)."""
    head = ops[:n]
    # (in C, stopping at the first difference: asked once per trail at every switch)
    return head == mine or (len(head) == len(mine)
                            and all(map(operator.eq, map(_BLIND, head), map(_BLIND, mine))))


_BLIND = operator.itemgetter(3)  # an interned op's blind key (``_op_of``)
_ENTRY_KEY = operator.attrgetter("key")  # an entry's ``key``


def _sig_of(func: Any, static: Static, outs: tuple, refs: tuple) -> OpSig:
    """The interned ``OpSig`` of an entry's interned parts with these references. Keyed
    by the parts' identities: the ``OpSig`` kept holds them, so no other object has
    their ids while it is kept."""
    key = (id(func), id(static), id(outs), refs)
    sig = _SIGS.get(key)
    if sig is None:
        if len(_SIGS) >= _KEPT:
            _SIGS.clear()
        sig = _SIGS[key] = build(OpSig, (func, static, refs, outs))
    return sig


def _vref(i: int, k: int) -> ValueRef:
    """``ValueRef("v", i, k)``, shared for small ``i`` and ``k``."""
    if i < 4096 and k < 8:
        while len(_VREFS) <= i:
            _VREFS.append([build(ValueRef, ("v", len(_VREFS), j)) for j in range(8)])
        return _VREFS[i][k]
    return build(ValueRef, ("v", i, k))


@dataclass
class Segment:
    """Entries since the last start point, which values they produced, and weak
    references to those values (liveness at the segment's end).

    Each entry's ``OpSig`` relative to the segment's start (``relative(0, e)``, what a
    closed segment and a cut are keyed by) is built as the entry is appended, interned
    (``_sig_of``), so closing or cutting the segment reads them instead of building a
    new signature per op per search. A segment whose start moved (``drop``), or in which
    a value was produced twice, builds its signatures as before (``_relative``)."""

    entries: list[Entry] = field(default_factory=list)
    src: dict[int, tuple[int, int]] = field(default_factory=dict)  # vid -> (seq, output)
    wrefs: list[tuple] = field(default_factory=list)  # per entry: weakref per output or None
    seq: int = 0  # the next entry's stream position
    sigs0: list[OpSig] = field(default_factory=list)  # per entry: its OpSig from the start
    slots0: dict[int, int] = field(default_factory=dict)  # input vid -> slot, from the start
    # per input slot from the start: the entry that first used it (ascending; the slots
    # of the entries before ``e`` are the first ``bisect_left(first0, e)``)
    first0: list[int] = field(default_factory=list)
    rel0: bool = True  # sigs0 / slots0 hold (no drop, no value produced twice)
    ops: list[tuple] = field(default_factory=list)  # per entry: its interned op (``_op_of``)
    # the stream this segment follows (``trail``): (first op, its ops, their sigs0), the
    # last segment closed that began with this segment's first op; None once they differ
    trail: tuple | None = None
    whole: bool = True  # ``ops`` are all since the segment's start (no ``drop``)
    # id(first op) -> trails of segments that began with it, most recent first
    trails: dict[int, list[tuple]] = field(default_factory=dict)
    gen: int = 0  # segments cleared or dropped from so far (``trailrun.run``'s flow is for one)

    def __len__(self) -> int:
        return len(self.entries)

    def append(self, func: Any, call: tuple, struct: str, tensors: list[torch.Tensor],
               outs: tuple, leaves: list) -> Call:
        """Record an op: ``call`` is its ``static_of``, ``struct`` and ``outs`` its
        ``outputs_of``. Returns the interned ``call`` (equal to it)."""
        op = _op_of(func, call, struct, outs)
        self.append_op(op, tensors, leaves)
        return op[4]

    def expect(self, func: Any, tried: tuple | None = None) -> tuple | None:
        """The interned op the trail has at the next position, if it is ``func``'s; else
        the op of another trail from the same first op that went the same way so far and
        goes on with ``func`` (which is followed from now on); else None (the op is
        recorded in full, and, if no trail goes on with ``func``, so is the rest).
        ``tried``: the trail's op, which the call is not (another argument): another
        trail's op for ``func`` there, if any; else the trail stays as it is."""
        tr = self.trail
        if tr is None:
            return None
        ops = tr[1]
        n = len(self.entries)
        if tried is None and n < len(ops):
            op = ops[n]
            if op[0] is func:
                return op
        mine = self.ops
        for alt in self.trails.get(id(mine[0]), ()):  # (``ops`` from the start: no drop)
            ops = alt[1]
            if alt is not tr and n < len(ops) and ops[n][0] is func \
                    and ops[n] is not tried and (_went_as(ops, mine, n) if tried is None
                                                 else ops[:n] == mine):
                self.trail = alt
                return ops[n]
        if tried is None:
            self.trail = None
        return None

    def append_op(self, op: tuple, tensors: list[torch.Tensor], leaves: list,
                  flow: tuple | None = None) -> None:
        """Record an op given as its interned op (``_op_of``): what ``append`` stores,
        found without describing the op again when the caller checked it against the
        trail (``trail.check``). The op's signature from the start is the trail's when its
        references are (the same interned object ``_sig_of`` would find). ``flow``:
        ``trailrun.run``'s flow for the op, if the caller has it (used if the segment is
        still the one it was found for)."""
        func, outs = op[0], op[2]
        seq = self.seq
        n = len(self.entries)
        if n == 0:  # the first op: the last segment that began with it, if any
            trs = self.trails.get(id(op))
            self.trail = trs[0] if trs and trs[0][0] is op and get_value("ae_record_trail") \
                else None
        self.seq += 1
        src = self.src
        rel0 = self.rel0
        if rel0:
            slots = self.slots0
        sig = None  # the op's signature from the start, if ``flow`` gives it
        if flow is not None and flow[0] == self.gen and flow[1] == n and rel0:
            vids = flow[2]
            sig = flow[4]
            if flow[3] is not None:  # (its new input slots)
                for vid in flow[3]:
                    slots[vid] = len(slots)
                    self.first0.append(n)
        else:
            vids = []
            refs = []
            for t in tensors:  # ``vid_of``, without its call for a wrapper seen before
                v = t.__dict__.get("_ae_vid")
                vid = v[0] if v is not None and v[1] == id(t) else vid_of(t)
                vids.append(vid)
                if rel0:  # ``_relative``'s reference, for the window from the start
                    p = src.get(vid)
                    if p is not None:  # (its reference from the start, kept when produced)
                        refs.append(p[2])
                    else:
                        j = slots.get(vid)
                        if j is None:
                            j = slots[vid] = len(slots)
                            self.first0.append(n)
                        refs.append(_INPUTS[j] if j < _N_INPUTS else InputRef("x", j))
        wrefs = []
        k = 0
        for out in outs:
            if out is not None and type(out) is not SameOut:
                r = leaves[k]
                d = r.__dict__  # ``vid_of`` and ``_alive_token``, without their calls
                v = d.get("_ae_vid")
                if v is not None and v[1] == id(r):
                    vid = v[0]
                    if vid in src or (rel0 and vid in slots):
                        # produced twice, or used before it was produced: the signatures
                        # from the start are built at the end, as they always were
                        self.rel0 = rel0 = False
                else:  # a new wrapper (most outputs): a value never seen
                    vid = next(_vids)
                    d["_ae_vid"] = (vid, id(r))
                # (seq, output, its reference from the start while ``rel0`` holds: every
                # value in ``src`` is then from this segment, the start is entry 0)
                src[vid] = (seq, k, (_VREFS[n][k] if n < len(_VREFS) and k < 8
                                     else _vref(n, k)) if rel0 else None)
                token = d.get("_ae_alive")
                if token is None:
                    token = d["_ae_alive"] = _Alive()
                wrefs.append(weakref.ref(token))
            else:
                wrefs.append(None)
            k += 1
        self.entries.append(build(Entry, (func, op[1], tuple(vids), outs, seq, op[3])))
        self.ops.append(op)
        self.wrefs.append(tuple(wrefs))
        if rel0 and sig is not None:
            self.sigs0.append(sig)
        elif rel0:
            refs = tuple(refs)
            tr = self.trail
            if tr is not None and n < len(tr[2]) and tr[1][n] is op and tr[2][n].refs == refs:
                self.sigs0.append(tr[2][n])
            else:
                self.sigs0.append(_sig_of(func, op[1], outs, refs))

    def clear(self) -> None:
        ops = self.ops
        if ops and self.whole:  # a trail of the next segments that begin with the same op
            self._keep_trail(ops)
            self.ops, self.sigs0 = [], []  # (kept by the trail: new lists)
        else:
            ops.clear()
            self.sigs0.clear()
        self.trail = None
        self.whole = True
        self.gen += 1
        self.entries.clear()
        self.src.clear()
        self.wrefs.clear()
        self.slots0.clear()
        self.first0.clear()
        self.rel0 = True

    def _keep_trail(self, ops: list[tuple]) -> None:
        """Keep the segment closing now as the first trail of its first op (the most recent
        ``_TRAILS_PER_START``, a trail of the same ops replaced)."""
        trails = self.trails
        key = id(ops[0])
        if len(trails) >= _TRAILS_KEPT and key not in trails:
            trails.clear()
        kept = trails.get(key)
        if kept is None or kept[0][0] is not ops[0]:
            kept = trails[key] = []
        kept[:] = [(ops[0], ops, self.sigs0),
                   *(t for t in kept if t[1] != ops)][:_TRAILS_PER_START]

    def drop(self, k: int) -> None:
        """Forget the first ``k`` entries (closed as regions); values they produced count
        as inputs of later windows from now on."""
        del self.entries[:k]
        self.gen += 1
        del self.wrefs[:k]
        del self.ops[:k]
        self.trail = None  # (positions moved: not followed, nor kept, until the next start)
        self.whole = False
        self.rel0 = False  # (the start moved: ``relative`` builds its signatures)
        self.sigs0.clear()
        self.slots0.clear()
        self.first0.clear()

    def keys(self, start: int = 0) -> list[int]:
        """Hashes of the static signatures from ``start`` (for finding periods)."""
        # (``[e.key for e in ...]`` in C: asked at every closed segment and period check)
        return list(map(_ENTRY_KEY, self.entries[start:] if start else self.entries))

    def relative(self, s: int, e: int) -> tuple[tuple[OpSig, ...], list[int]]:
        """The signature of window ``[s, e)``: an ``OpSig`` per entry, whose refs are
        ``ValueRef``s (output k of window entry i) or ``InputRef``s (input slots); and the
        wrapper id of each input slot."""
        if s == 0 and self.rel0 and e > 0:
            slots = self.slots0
            n = bisect.bisect_left(self.first0, e)
            return tuple(self.sigs0[:e]), (list(slots) if n == len(slots)
                                           else list(itertools.islice(slots, n)))
        return self._relative(s, e)

    def _relative(self, s: int, e: int) -> tuple[tuple[OpSig, ...], list[int]]:
        """``relative``, built from the entries."""
        base = self.entries[s].seq
        slots: dict[int, int] = {}
        sigs = []
        for entry in self.entries[s:e]:
            refs = []
            for vid in entry.vids:
                p = self.src.get(vid)
                if p is not None and p[0] >= base:
                    refs.append(_vref(p[0] - base, p[1]))
                else:
                    j = slots.setdefault(vid, len(slots))
                    refs.append(_INPUTS[j] if j < _N_INPUTS else InputRef("x", j))
            sigs.append(_sig_of(entry.func, entry.static, entry.outs, tuple(refs)))
        return tuple(sigs), list(slots)

    def live_at(self, s: int, e: int) -> set[tuple[int, int]]:
        """Values of window ``[s, e)`` that may be used after it: read by a later entry of
        the segment, or still held now. As (window entry, output) pairs."""
        base = self.entries[s].seq
        end = self.entries[e - 1].seq
        live: set[tuple[int, int]] = set()
        for entry in self.entries[e:]:
            for vid in entry.vids:
                p = self.src.get(vid)
                if p is not None and base <= p[0] <= end:
                    live.add((p[0] - base, p[1]))
        for i in range(s, e):
            for k, ref in enumerate(self.wrefs[i]):
                if ref is not None and ref() is not None:
                    live.add((i - s, k))
        return live
