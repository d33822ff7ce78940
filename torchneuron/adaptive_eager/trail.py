"""The recorder's fast path: a segment that repeats one recorded before is checked against it.

Every step records the same ops again. Recording an op in full describes its arguments
(``recorder.static_of``: a nested tuple per argument), looks the description up among the
ops seen before (``recorder._op_of``: a hash down to the shapes) and builds its signature
from the segment's start (``recorder._sig_of``). When the segment so far is the segment
that last began with the same op (its *trail*, ``recorder.Segment.trails``), the next op
is most likely the trail's next op: it is checked against that op as a replay's guard
checks it (``guard``: the same overload, the exact argument description, grad mode and
autocast state, compared without building anything) and, if it is that op, recorded as a
reference to the trail's interned op. At the first difference (another overload, another
argument, another output) the rest of the segment is recorded in full.

Nothing recorded changes: an op the check takes is one ``static_of`` describes exactly as
the trail's op (``guard.match`` is sound, never lenient), its outputs are still described
by ``recorder.outputs_of`` and compared with the trail's, and ``_op_of`` would have found
the trail's op for it. Regions, their keys and counts, and so every decision the runtime
makes, are those of the full path.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from torchneuron.adaptive_eager.guard import _guard
from torchneuron.adaptive_eager.signature import OpSig, SameOut, ViewOut
from torchneuron.device.tensor import NeuronTensor

__all__ = ["check", "outputs"]

_NoTorchFunction = torch._C.DisableTorchFunctionSubclass
_NO_INDEX_CHECKS: frozenset = frozenset()


def _check_of(op: tuple) -> Any:
    """The flat check of interned op ``op`` (``guard._generate``), built on first use and
    kept in the op (its last item), or False if the op has none."""
    box = op[5]
    got = box[0]
    if got is None:
        func, static, outs = op[0], op[1], op[2]
        # (no references: only the arguments are checked here, the dataflow is found as
        # the op is appended)
        g = _guard(0, OpSig(func, static, (), outs), _NO_INDEX_CHECKS)
        got = box[0] = g.check if g.check is not None else False
    return got


def check(op: tuple, args: tuple, kwargs: dict) -> list[torch.Tensor] | None:
    """The tensor arguments of a call of ``op``'s overload, in ``static_of``'s order, if
    ``static_of`` would describe the call exactly as ``op`` (its ``Call``); else None."""
    fn = _check_of(op)
    if fn is False:
        return None
    tensors: list[torch.Tensor] = []
    with _NoTorchFunction():  # (metadata reads as ``static_of``'s)
        if fn(args, kwargs, tensors, []) is None:
            return None
    return tensors


def outputs(op: tuple, result: Any, tensors: list[torch.Tensor]) -> list | None:
    """The output leaves of ``result`` if ``recorder.outputs_of(result, tensors)`` would
    describe them exactly as ``op``'s (its result's structure and outputs), else None
    (the caller describes them in full): the same reads, compared instead of built."""
    struct, expected = op[1].result, op[2]
    tp = type(result)
    if struct == "single":
        if tp is not NeuronTensor:
            return None
        leaves = [result]
    elif struct == "none":
        return [] if result is None else None
    elif tp is (list if struct == "list" else tuple):
        leaves = list(result)
        if len(leaves) != len(expected):
            return None
    else:
        return None
    ids = list(map(id, tensors))  # (loops in C)
    ptrs = None
    with _NoTorchFunction():
        k = 0
        for out in expected:
            r = leaves[k]
            k += 1
            if out is None:
                if r is not None:
                    return None
                continue
            if type(r) is not NeuronTensor or r._buffer is None:
                return None
            same = ids.index(id(r)) if id(r) in ids else None  # (the first, as outputs_of)
            if type(out) is SameOut:
                if same != out.arg:
                    return None
                continue
            if same is not None:
                return None
            if ptrs is None:
                ptrs = list(map(_DATA_PTR, map(_STORAGE, map(_BUFFER, tensors))))
            storage = r._buffer.untyped_storage()
            nbytes = storage.nbytes()
            ptr = storage.data_ptr() if nbytes else -1  # (as ``outputs_of``)
            view = ptrs.index(ptr) if ptr in ptrs else None
            if type(out) is ViewOut:
                if view != out.arg:
                    return None
            elif view is not None or nbytes != out.nbytes:
                return None
            m = out.meta
            if (r.dtype is not m.dtype or r.storage_offset() != m.offset
                    or r.stride() != m.stride or r.shape != m.shape):
                return None
    return leaves


_BUFFER = operator.attrgetter("_buffer")
_STORAGE = torch.Tensor.untyped_storage
_DATA_PTR = torch.UntypedStorage.data_ptr
