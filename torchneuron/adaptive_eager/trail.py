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
from torchneuron.adaptive_eager.lift import MARK, _floats, _replace
from torchneuron.adaptive_eager.recorder import outputs_of
from torchneuron.adaptive_eager.signature import Call, OpSig, Static, Unsupported, build

__all__ = ["check", "check_floats", "inherit_checks", "outputs", "taken"]

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


def taken(op: tuple, args: tuple, kwargs: dict) -> tuple[list[torch.Tensor], Any] | None:
    """(tensor arguments, template) if ``op``'s flat check takes the call (``check``,
    with the check's answer, which ``trailrun`` rebuilds the call from); else None."""
    fn = op[5][0]
    if fn is None:
        fn = _check_of(op)
    if fn is False:
        return None
    tensors: list[torch.Tensor] = []
    with _NoTorchFunction():
        template = fn(args, kwargs, tensors, [])
    return None if template is None else (tensors, template)


def _floats_check_of(op: tuple) -> Any:
    """The flat check of interned op ``op`` with each top-level float taken as whatever
    float the call has (as a region's guard takes a lifted float, ``lift``), built on
    first use and kept in the op's box (with where those floats are), or False if the
    op has no such float or no flat check."""
    box = op[5]
    got = box[2]
    if got is None:
        func, static, outs = op[0], op[1], op[2]
        fl = _floats(static)
        got = False
        if fl:
            marked = Static(_replace(static.args, {w: (MARK, n) for n, (w, _) in enumerate(fl)}),
                            static.grad, static.autocast, static.result)
            g = _guard(0, OpSig(func, marked, (), outs), _NO_INDEX_CHECKS)
            if g.check is not None:
                got = g.check
                box[3] = tuple(w for w, _ in fl)
        box[2] = got
    return got


def check_floats(op: tuple, args: tuple, kwargs: dict) -> tuple[list[torch.Tensor], Any, Call] | None:
    """(tensor arguments, template, the call's ``Call``) if ``static_of`` would describe
    the call as ``op``'s ``Call`` but for the values of top-level floats: an optimizer's
    scalars that change every step (AdamW's bias corrections). The ``Call`` is then
    ``static_of``'s (``("float", repr(value))`` at each float, the rest the op's), and
    the template has the call's floats. Why: such an op is on its trail in everything
    eager's facts depend on (``fastpath`` keys a float by its type alone), so it can run
    on buffers as the trail's op runs; it is recorded as its own op, as in full. Else
    None."""
    fn = _floats_check_of(op)
    if fn is False:
        return None
    tensors: list[torch.Tensor] = []
    lifted: list = []
    with _NoTorchFunction():
        template = fn(args, kwargs, tensors, lifted)
    if template is None:
        return None
    where = op[5][3]
    call = op[4]
    desc = _replace(call.args, {where[n]: ("float", repr(a)) for n, a in lifted})
    return tensors, template, build(Call, (desc, call.grad, call.autocast))


def inherit_checks(op: tuple, trail_op: tuple) -> None:
    """Give ``op``, just interned for a call that is ``trail_op`` but for its floats'
    values (``check_floats``), the trail op's float-blind check, and as its exact check
    that same check followed by a comparison of each float's ``repr`` with ``op``'s own
    (what ``static_of`` describes a float by), unless ``op`` has its checks already.

    Why: AdamW's bias corrections make such an op every step; the next step its exact
    check is asked first (and fails: the floats moved again), and generating it
    (``guard._guard``: ``_flatten``, ``_generate``) cost about as much as the rest of the
    op's recording. The derived check takes exactly the calls the generated one takes:
    the float-blind check compares every argument as the exact one does but for the
    top-level floats, which it takes as any float (their exact type, ``float``), and a
    float whose ``repr`` is the recorded one is the recorded float. Its template holds
    the call's floats (equal to ``op``'s). The first call it takes (the floats came
    again: an op seen twice in one step, or floats that stopped changing) puts the
    generated check in its place (``_check_of``), with how the op is rebuilt with it."""
    box, tbox = op[5], trail_op[5]
    if box[2] is None:
        box[2:] = tbox[2:]
    fn = box[2]
    if box[0] is not None or not fn:
        return
    want = tuple(r for _, r in _floats(op[4]))
    if len(want) != len(box[3]):  # (not the trail op's floats: built when asked)
        return

    def exact(args: tuple, kwargs: dict, tensors: list, _lifted: list) -> Any:
        got: list = []
        template = fn(args, kwargs, tensors, got)
        if template is None:
            return None
        for n, a in got:
            if repr(a) != want[n]:
                return None
        # the floats came again: from now on the op's own generated check (as
        # ``_check_of`` builds it), and how it is rebuilt with it
        box[0] = None
        _check_of(op)
        return template

    box[0] = exact
    box[1] = False


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
