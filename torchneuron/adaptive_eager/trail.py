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

from typing import Any

import torch

from torchneuron.adaptive_eager import trailrun
from torchneuron.adaptive_eager.guard import _guard
from torchneuron.adaptive_eager.recorder import outputs_of
from torchneuron.adaptive_eager.signature import OpSig, Unsupported

__all__ = ["check", "outputs"]

_NoTorchFunction = torch._C.DisableTorchFunctionSubclass
_NO_INDEX_CHECKS: frozenset = frozenset()


def _check_of(op: tuple) -> Any:
    """The flat check of interned op ``op`` (``guard._generate``), built on first use and
    kept in the op (its last item, with how ``trailrun`` rebuilds the call on buffers),
    or False if the op has none."""
    box = op[5]
    got = box[0]
    if got is None:
        func, static, outs = op[0], op[1], op[2]
        # (no references: only the arguments are checked here, the dataflow is found
        # before the op runs, ``trailrun.run``, or as it is appended)
        g = _guard(0, OpSig(func, static, (), outs), _NO_INDEX_CHECKS)
        got = box[0] = g.check if g.check is not None else False
        # how ``trailrun`` rebuilds the call on buffers: the tensors in order (True), a
        # generated function of them for a constant template (no float of the call's own
        # in it), or ``rebuild_call`` (False)
        box[1] = True if g.plain else (
            g.check is not None and not g.floats and trailrun.rebuilder(g.template) or False)
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
    """The output leaves of ``result`` if ``recorder.outputs_of(result, tensors)``
    describes them exactly as ``op``'s (its result's structure and outputs), else None
    (the caller describes them in full). The descriptions are interned, so the comparison
    is one of identities; a comparison written beside ``outputs_of`` cost as much."""
    try:
        struct, outs, leaves = outputs_of(result, tensors)
    except Unsupported:
        return None
    return leaves if struct == op[1].result and outs == op[2] else None
