"""An op recorded on its trail runs as the first tier runs it: on buffers, with eager's facts.

Why: recording runs every op through eager dispatch (``dispatch.run_op``), which unwraps
each neuron tensor and keys the op's signature from the buffers' metadata (each
``stride()`` alone costs about 700 instructions) to find what it decided for that
signature before. An op recorded on its trail (``trail``) has just had the same metadata
read on its wrappers by the trail's check, found exactly the trail op's, and its dataflow
from the segment's start found the trail's before it runs (the same arguments are the
same tensors; the references found are kept for appending it, with its buffers). So
eager's key is the key it had at this trail position before, and so are its facts
(``dispatch.rerun.facts_of``, kept per signature from the start, the interned ``OpSig``).
The op runs with them (``dispatch.rerun.rerun``), as the first tier's deferred ops run
(``deferred``): the same kernel, the same charge and the same memory accounting, its
results wrapped as eager wraps them. What is recorded does not change: the outputs are
described from the wrappers as before.

An op runs through ``run_op`` as before when eager would not take its fast path (no
facts), when an argument is pending, on another device, has a buffer that is not a plain
tensor, or shares a buffer with another argument that is a different tensor (eager's key
tells repeated buffers apart), in inference mode for a view, or under a fake mode.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.adaptive_eager.recorder import Segment, vid_of
from torchneuron.adaptive_eager.signature import OpSig, Slot, rebuild_call
from torchneuron.dispatch.eager import _wrap_one, _wrap_outputs
from torchneuron.dispatch.rerun import Facts, facts_of, rerun
from torchneuron.hardware.core import NeuronCore

__all__ = ["run", "NOT_RUN", "rebuilder"]

NOT_RUN = object()  # ``run``'s answer when the op must go through ``run_op``
_Tensor = torch.Tensor
_inference_mode = torch.is_inference_mode_enabled
_get_dispatch_mode = torch._C._get_dispatch_mode
_FAKE = torch._C._TorchDispatchModeKey.FAKE
# id(OpSig) -> (the OpSig, its facts or None, distinct tensors among its arguments)
_FACTS: dict[int, tuple[OpSig, Facts | None, int]] = {}
_KEPT = 1 << 16  # (all forgotten at once past this)


def run(seg: Segment, sig: OpSig, op: tuple, args: tuple, kwargs: dict,
        tensors: list[torch.Tensor], template: Any, index: int,
        core: NeuronCore, exact: bool = True) -> tuple | None:
    """None if the next op of ``seg``, with tensor arguments ``tensors``, has not ``sig``'s
    references from the segment's start (the trail's op there); else ``(flow, result,
    leaves)``. ``flow``: what ``Segment.append_op`` takes to append the op without
    finding its references again (the segment's generation and length, the arguments'
    wrapper ids, the ids of its new input slots in order, ``sig``), found as
    ``append_op`` finds them (the only change: a tensor never seen gets its id,
    ``vid_of``, as appending it would give it). ``result``: of ``func(*args, **kwargs)``
    run on buffers with eager's facts for ``sig``, or ``NOT_RUN`` (the caller runs it
    through eager dispatch). ``leaves``: the result's output leaves if
    ``recorder.outputs_of`` would describe them as ``op``'s outputs (``_single``), else
    None (the caller describes them). ``op``: the trail's interned op there
    (``recorder._op_of``); ``template``: the call with ``Slot``s for the tensors (the
    trail check's answer); ``core``: device ``index``'s (``get_core``), charged for the run.
    ``exact``: False if the call is ``op`` but for its floats' values
    (``trail.check_floats``): the same facts (eager keys a float by its type), its call
    rebuilt from ``template``, which has its own floats."""
    refs = sig.refs
    if not seg.rel0 or len(refs) != len(tensors):
        return None
    src = seg.src
    slots = seg.slots0
    vids = []
    news = None  # the vids of new input slots, in order
    bufs = []  # (a loop: a comprehension is a call)
    same = {}
    runs = True
    i = 0
    for t in tensors:  # the references and the buffers, in one pass
        v = t.__dict__.get("_ae_vid")
        vid = v[0] if v is not None and v[1] == id(t) else vid_of(t)
        vids.append(vid)
        r = refs[i]
        i += 1
        p = src.get(vid)
        if p is not None:  # a value of the segment: its reference kept when produced
            if p[2] != r:
                return None
        else:
            j = slots.get(vid)
            if j is None:
                if news is None:
                    news = []
                if vid in news:
                    j = len(slots) + news.index(vid)
                else:
                    j = len(slots) + len(news)
                    news.append(vid)
            if r[0] != "x" or r[1] != j:  # (``InputRef("x", j)``)
                return None
        b = t._buffer
        if t._pending is not None or type(b) is not _Tensor or t._device_index != index:
            runs = False
        same[id(b)] = t
        bufs.append(b)
    flow = (seg.gen, len(seg.entries), vids, news, sig)
    if not runs:
        return flow, NOT_RUN, None
    func = op[0]
    # two different tensors with one buffer: eager's key is another (it tells repeated
    # buffers apart), so the facts found for the signature are not the call's
    got = _FACTS.get(id(sig))
    if got is None or got[0] is not sig:
        n = len(set(sig.refs))  # (the distinct tensors among the arguments)
        if len(same) != n:
            return flow, NOT_RUN, None
        if len(_FACTS) >= _KEPT:
            _FACTS.clear()
        # (before the op runs: eager keys it by these arguments' metadata)
        got = _FACTS[id(sig)] = (sig, facts_of(func, args, kwargs, True), n)
    elif len(same) != got[2]:
        return flow, NOT_RUN, None
    facts = got[1]
    if facts is None or (facts.rec.is_view and _inference_mode()) \
            or _get_dispatch_mode(_FAKE) is not None:
        return flow, NOT_RUN, None
    # (``trail._check_of``: how the op's call is rebuilt on the buffers)
    how = op[5][1] if exact else False
    if how is True:  # (the template is the tensors in order: ``guard.OpGuard.plain``)
        out = rerun(facts, tuple(bufs), {}, bufs, core)
    else:
        uargs, ukwargs = how(bufs) if how else rebuild_call(template, bufs)
        out = rerun(facts, uargs, ukwargs, bufs, core)
    if type(out) is _Tensor:
        res = same.get(id(out))  # (an argument's buffer: the argument, as ``_wrap_one``)
        if res is None:
            res = _wrap_one(out, same, index, True)
        return flow, res, (_single(op[2][0], res, tensors, bufs) if op[1].result == "single"
                           else None)
    return flow, _wrap_outputs(out, same, index), None


def _single(o: Any, res: torch.Tensor, tensors: list[torch.Tensor],
            bufs: list[torch.Tensor]) -> list | None:
    """``[res]`` if ``recorder.outputs_of(res, tensors)`` describes the one output
    ``res`` as ``o`` (the trail op's), else None; without building the description.
    ``bufs``: the arguments' buffers. A new wrapper's metadata is its buffer's
    (``wrap_buffer``), read there, below any ``__torch_function__``."""
    tag = o[0]
    if tag == "same":  # (an earlier argument that is it has the same reference: the trail's)
        return [res] if res is tensors[o[1]] else None
    for t in tensors:
        if t is res:
            return None
    b = res._buffer
    m = o[1]
    if b.dtype is not m[3] or b.storage_offset() != m[2] or b.stride() != m[1] \
            or b.shape != m[0]:
        return None
    storage = b.untyped_storage()
    nbytes = storage.nbytes()
    ptr = storage.data_ptr() if nbytes else -1  # (as ``outputs_of``: empty is no view)
    if tag == "new":
        if nbytes != o[2]:
            return None
        for x in bufs:
            if x.untyped_storage().data_ptr() == ptr:
                return None
        return [res]
    j = o[2]  # a view of argument j, the first whose storage it is
    for i in range(j):
        if bufs[i].untyped_storage().data_ptr() == ptr:
            return None
    return [res] if bufs[j].untyped_storage().data_ptr() == ptr else None


def rebuilder(template: tuple) -> Any:
    """``rebuild_call(template, bufs)`` as a function of ``bufs`` alone, generated once
    for a template that is the same every call (a trail op's check answers its constant
    template when the op has no float of the call's own to put in it), or None if the
    template holds a dict. Why: ``rebuild_call``'s loop over the arguments ran for every
    op on its trail whose template is not its tensors in order (``sum(x, [0], True)``,
    ``add_(p, g, alpha=a)``). The call it builds is ``rebuild_call``'s: the tensors, new
    lists and tuples around them, the template's scalars themselves, the keywords in
    order."""
    ns: dict[str, Any] = {}

    def expr(a: Any) -> str | None:
        tp = type(a)
        if tp is Slot:
            return f"b[{a.j}]"
        if tp is list or tp is tuple:
            items = []
            for x in a:
                e = expr(x)
                if e is None:
                    return None
                items.append(e)
            return f"[{', '.join(items)}]" if tp is list else f"({''.join(e + ', ' for e in items)})"
        if tp is dict or isinstance(a, (Slot, list, tuple, dict)):
            return None  # (``rebuild`` walks subclasses too; not generated)
        name = f"k{len(ns)}"
        ns[name] = a
        return name

    atemp, ktemp = template
    args = expr(tuple(atemp))  # (the positional arguments: a tuple, built as a tuple is)
    values = [expr(a) for a in ktemp.values()]
    if args is None or None in values:
        return None
    kws = ", ".join(f"{k!r}: {e}" for k, e in zip(ktemp, values, strict=True))
    text = f"def rb(b):\n    return {args}, {{{kws}}}"
    code = _CODES.get(text)  # (the same text for every template of one shape)
    if code is None:
        if len(_CODES) >= _KEPT:
            _CODES.clear()
        code = _CODES[text] = compile(text, "<trailrun.rebuilder>", "exec")
    exec(code, ns)  # noqa: S102
    return ns["rb"]


_CODES: dict[str, Any] = {}  # a rebuilder's text -> its code: compiling costs far more
