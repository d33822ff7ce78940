"""The recorder: the eager op stream as entries, and the segment since the last start point.

Each op that runs eagerly on neuron tensors becomes an ``Entry``: its overload, the static
description of its arguments, the values its tensor arguments are (by a per-wrapper id),
and what each output is: a new value, a view of an argument, or the argument itself (an
in-place op). A *segment* is the run of entries since the last start point (a sync, the
end of a replay, a cut). Windows of a segment become regions: ``relative`` re-expresses a
window's dataflow relative to its start (earlier values of the window, or input slots in
order of first use), which is what a region is keyed and guarded by.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from torchneuron.adaptive_eager.signature import Unsupported, describe, meta_of
from torchneuron.device.tensor import NeuronTensor

__all__ = ["Entry", "Segment", "vid_of", "static_of", "outputs_of"]

_vids = itertools.count(1)


def vid_of(t: torch.Tensor) -> int:
    """A process-unique id for a tensor wrapper (never reused, unlike ``id``)."""
    d = t.__dict__
    v = d.get("_ae_vid")
    if v is None:
        v = d["_ae_vid"] = next(_vids)
    return v


def static_of(func: Any, args: tuple, kwargs: dict) -> tuple[tuple, Any, list[torch.Tensor]]:
    """(static signature, argument template, tensor arguments) of a call; may raise
    ``Unsupported``."""
    tensors: list[torch.Tensor] = []
    desc, template = describe((args, kwargs), tensors)
    return (desc, torch.is_grad_enabled(), torch.is_autocast_enabled()), template, tensors


def _storage_ptr(t: NeuronTensor) -> int:
    return t._buffer.untyped_storage().data_ptr()  # type: ignore[union-attr]


def outputs_of(result: Any, tensors: list[torch.Tensor]) -> tuple[str, tuple, list]:
    """(structure, output descriptions, output leaves) of an op's result.

    Each output is ``None``, ``("same", j)`` (it is tensor argument j), ``("view", meta, j)``
    (a view of argument j's storage) or ``("new", meta, storage_nbytes)``.
    """
    if isinstance(result, torch.Tensor):
        struct, leaves = "single", [result]
    elif isinstance(result, (tuple, list)):
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
        if not isinstance(r, NeuronTensor) or r._buffer is None:
            raise Unsupported("an output that is not a neuron tensor")
        same = next((j for j, t in enumerate(tensors) if t is r), None)
        if same is not None:
            outs.append(("same", same))
            continue
        if ptrs is None:
            ptrs = [_storage_ptr(t) for t in tensors]  # type: ignore[arg-type]
        ptr = _storage_ptr(r)
        j = next((j for j, p in enumerate(ptrs) if p == ptr), None)
        if j is not None:
            outs.append(("view", meta_of(r), j))
        else:
            outs.append(("new", meta_of(r), r._buffer.untyped_storage().nbytes()))  # type: ignore[union-attr]
    return struct, tuple(outs), leaves


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


@dataclass
class Entry:
    """One recorded op."""

    func: Any
    static: tuple  # (argument description, grad mode, autocast, output structure)
    vids: tuple[int, ...]  # the wrapper id of each tensor argument
    outs: tuple  # output descriptions (see ``outputs_of``)
    seq: int  # position in the whole stream


@dataclass
class Segment:
    """Entries since the last start point, which values they produced, and weak
    references to those values (liveness at the segment's end)."""

    entries: list[Entry] = field(default_factory=list)
    src: dict[int, tuple[int, int]] = field(default_factory=dict)  # vid -> (seq, output)
    wrefs: list[tuple] = field(default_factory=list)  # per entry: weakref per output or None
    seq: int = 0  # the next entry's stream position

    def __len__(self) -> int:
        return len(self.entries)

    def append(self, func: Any, static: tuple, tensors: list[torch.Tensor], outs: tuple,
               leaves: list) -> None:
        seq = self.seq
        self.seq += 1
        refs = []
        for k, (out, r) in enumerate(zip(outs, leaves, strict=True)):
            if out is not None and out[0] != "same":
                self.src[vid_of(r)] = (seq, k)
                refs.append(weakref.ref(_alive_token(r)))
            else:
                refs.append(None)
        self.entries.append(Entry(func, static, tuple(vid_of(t) for t in tensors), outs, seq))
        self.wrefs.append(tuple(refs))

    def clear(self) -> None:
        self.entries.clear()
        self.src.clear()
        self.wrefs.clear()

    def drop(self, k: int) -> None:
        """Forget the first ``k`` entries (closed as regions); values they produced count
        as inputs of later windows from now on."""
        del self.entries[:k]
        del self.wrefs[:k]

    def keys(self, start: int = 0) -> list[int]:
        """Hashes of the static signatures from ``start`` (for finding periods)."""
        return [hash((e.func, e.static, e.outs)) for e in self.entries[start:]]

    def relative(self, s: int, e: int) -> tuple[tuple, list[int]]:
        """The signature of window ``[s, e)``: per entry (func, static, refs, outs), refs
        ``("v", i, k)`` (output k of window entry i) or ``("x", slot)``; and the wrapper id
        of each input slot."""
        base = self.entries[s].seq
        slots: dict[int, int] = {}
        sigs = []
        for entry in self.entries[s:e]:
            refs = []
            for vid in entry.vids:
                p = self.src.get(vid)
                if p is not None and p[0] >= base:
                    refs.append(("v", p[0] - base, p[1]))
                else:
                    refs.append(("x", slots.setdefault(vid, len(slots))))
            sigs.append((entry.func, entry.static, tuple(refs), entry.outs))
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
