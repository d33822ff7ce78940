"""The deferred ops of a replay run eagerly: at a first-tier replay's end, or at a side exit.

They run in order, with their recorded arguments, exactly as eager would have run them,
and the pending values still held get their results. An op eager dispatch ran on its fast
path the first time (``dispatch.rerun.facts_of``, kept per region op in
``Region.rerun_facts``) runs again on plain buffers with those facts
(``dispatch.rerun.rerun``): the same kernel, the same charge and the same memory
accounting, without unwrapping its arguments, keying their metadata (the guards checked
it) and making a wrapper per result. That is the first tier's per-op host cost, which is
what makes it worth replaying before the compiled program is in.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from torchneuron.adaptive_eager import issued
from torchneuron.adaptive_eager.recorder import run_eagerly
from torchneuron.adaptive_eager.signature import rebuild_call
from torchneuron.adaptive_eager.trailrun import rebuilder
from torchneuron.device import buffers
from torchneuron.device.tensor import wrap_buffer
from torchneuron.dispatch.rerun import facts_of, rerun

if TYPE_CHECKING:
    from torchneuron.adaptive_eager.guard import OpGuard
    from torchneuron.adaptive_eager.replay import Replay

__all__ = ["run", "no_modes"]


def no_modes() -> contextlib.AbstractContextManager:
    """Run below dispatch modes (already so inside the mode's own ``__torch_dispatch__``)."""
    if torch._C._len_torch_dispatch_stack() == 0:
        return contextlib.nullcontext()
    return _disable_current_modes()


def run(rp: Replay) -> None:
    """Run the deferred ops eagerly, in order, with their recorded arguments, and give
    the pending values still held their results.

    An op eager dispatch ran on its fast path the first time (``rerun.facts_of``, kept
    per region op) runs again on plain buffers with those facts (``rerun.rerun``):
    the same kernel, charge and memory accounting, without unwrapping, keying and a
    wrapper per result. Its values stay buffers; an op that takes the general path
    gets wrappers for them (made once per value)."""
    guards = rp.guards  # the region's ops (``OpGuard.flow``, ``news``, ``struct``)
    facts = rp.region.rerun_facts
    if facts is None or len(facts) != len(guards):
        facts = rp.region.rerun_facts = [_UNSEEN] * len(guards)
    index = rp.index
    core = rp.core
    pending = rp.pending
    track = buffers.track
    hold = buffers.hold
    ext, ext_buffers = rp.ext, rp.ext_buffers
    # every value's buffer: an input slot's (what eager dispatch would unwrap from it,
    # as the general path below), then each op's results as they are made. An op's
    # tensor arguments are its guard's recorded flow, in order: the dataflow check took
    # it only if each was exactly that (this replay's value (i, k), or input slot j)
    bufs: dict = dict(enumerate(ext_buffers))
    getb = bufs.__getitem__
    wrapped: dict[tuple[int, int], torch.Tensor] = {}  # values as neuron tensors
    # the buffers no wrapper holds are counted until the run ends, as eager's would be
    # (``buffers.Holding``: a dict entry each, no holder object)
    holding = buffers.Holding().start()
    # an input whose wrapper got another buffer after its first use: the ops deferred
    # before that ran, in eager, on the buffer it had then (a loop: a comprehension is
    # a call)
    moved: dict[int, torch.Tensor] = {}
    for j, t in enumerate(ext):
        b = ext_buffers[j]
        if t._buffer is not b:
            moved[j] = wrap_buffer(b, index)
    # a view in inference mode takes eager dispatch's own path (its wrapper is made
    # outside inference mode, a composite one decomposed): the facts are not for it
    inference = torch.is_inference_mode_enabled()
    with no_modes():
        try:
            for i, template in enumerate(rp.templates):
                f = facts[i]
                g = guards[i]
                try:
                    if f is not _UNSEEN and f is not None and not (inference and f.rec.is_view):
                        tensors = tuple(map(getb, g.flow))
                        # (``_call_of``, inline: this is the path of nearly every op)
                        if template is not g.template:  # (a value of the call's own in it)
                            args, kwargs = rebuild_call(template, tensors)  # type: ignore[arg-type]
                        else:
                            rb = g.rebuild
                            args, kwargs = (tensors, {}) if rb is True else (rb or _rebuilder(g))(tensors)
                        out = rerun(f, args, kwargs, tensors, core)  # type: ignore[arg-type]
                        wrap = False
                    else:
                        tensors = [_wrapped(w, bufs, wrapped, index) if type(w) is tuple
                                   else moved[w] if w in moved else ext[w] for w in g.flow]
                        args, kwargs = _call_of(g, template, tensors)
                        if f is _UNSEEN:
                            facts[i] = facts_of(g.func, args, kwargs)
                        out = run_eagerly(g.func, args, kwargs, tensors)  # (factories as eager)
                        wrap = True
                except Exception as e:
                    detail = (f"deferred by adaptive eager as op {i} of region "
                              f"{rp.region.key}, run eagerly at its side exit")
                    where = rp.issued.get(i)
                    if where is None:
                        e.add_note(f"(raised by {g.func}, {detail})")
                        raise
                    raise issued.pointing_at(e, where, g.func, detail) from None
                news = g.news  # the outputs that are values of the region
                if not news:
                    continue
                leaves = (out,) if g.struct == "single" else out
                for k, ik in news:
                    o = leaves[k]
                    ref = pending.get(ik)  # (a value dropped by the program is gone)
                    v = ref() if ref is not None else None
                    if v is not None and v.result is not None:
                        v = None
                    if wrap:
                        wrapped[ik] = o
                        b = o._buffer
                    else:
                        b = o
                        if v is None:  # no pending tensor holds it: held until the run ends
                            hold(b, index)
                    bufs[ik] = b
                    if v is not None:  # ``v.give(b, index)``, inline: accounted from here,
                        v.result = b  # as the held buffer would be
                        track(v, b, index)
        finally:
            holding.stop()
            pending.clear()
    holding.release()


def _wrapped(ik: tuple[int, int], bufs: dict, wrapped: dict, index: int) -> torch.Tensor:
    """Value ``ik`` of this run as a neuron tensor (for an op on the general path)."""
    t = wrapped.get(ik)
    if t is None:
        t = wrapped[ik] = wrap_buffer(bufs[ik], index)
    return t



def _call_of(g: OpGuard, template: tuple, tensors: Any) -> tuple[tuple, dict]:
    """The call ``(args, kwargs)`` of a deferred op with guard ``g``, argument template
    ``template`` and tensor arguments ``tensors``: the tensors in order, or the guard's
    constant template rebuilt by its generated function, or ``rebuild_call``."""
    if template is not g.template:  # (a value of the call's own in it)
        return rebuild_call(template, tensors)
    rb = g.rebuild
    return (tuple(tensors), {}) if rb is True else (rb or _rebuilder(g))(tensors)


def _rebuilder(g: OpGuard) -> Any:
    """``g.rebuild``, made at the first deferred run of its op: ``rebuild_call`` of the
    guard's constant template as a function of the buffers alone
    (``trailrun.rebuilder``), generated once; ``rebuild_call`` itself where that
    cannot be generated."""
    rb = rebuilder(g.template)  # type: ignore[arg-type]
    if rb is None:
        template = g.template

        def rb(tensors: list) -> tuple:
            return rebuild_call(template, tensors)  # type: ignore[arg-type]
    g.rebuild = rb
    return rb


_UNSEEN = object()  # an op's rerun facts not asked yet (``Region.rerun_facts``)

