"""The dispatch mode and the op path: where every op on a neuron tensor meets adaptive
eager.

Every aten op on neuron tensors passes through ``AdaptiveEagerMode`` (after autograd, so
backward and optimizer ops too, and factory ops with ``device="neuron"``) into
``Runtime.on_op``. While a replay is in progress the op is deferred into it (``replay``)
or the replay switches variant or side-exits (``swapin``). Otherwise the op runs eagerly
and is recorded into the segment (``detect`` closes segments into region sightings), or,
at a start point, starts a replay (``swapin``). An op of a segment that repeats one seen
before is checked against that segment's op and recorded as a reference to it (``trail``). Host-to-device copies run eagerly and
stay inside (``hostdata``); reads and syncs end the segment; ops the compiler refused or
whose shapes grow every step run eagerly between regions.

``Runtime`` is the ledger its parts share (``ledger``) with the op path on top: it
builds the parts (``Lifecycle``, ``Detector``, ``SwapIn``) and hands each the ledger,
so none of them imports another in a circle.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch._C._dynamo.eval_frame import set_eval_frame as _set_eval_frame
from torch.utils._python_dispatch import TorchDispatchMode

from torchneuron.adaptive_eager import hostdata, trail, trailrun
from torchneuron.adaptive_eager.detect import PERIOD_CHECKS, Detector
from torchneuron.adaptive_eager.growing import _MAX_STEP_OPS, FIXED, NEW
from torchneuron.adaptive_eager.ledger import Ledger
from torchneuron.adaptive_eager.lifecycle import Lifecycle
from torchneuron.adaptive_eager.reasons import Reason
from torchneuron.adaptive_eager.recorder import _op_of, _sig_of, outputs_of, run_eagerly, static_of
from torchneuron.adaptive_eager.replay import MISMATCH
from torchneuron.adaptive_eager.signature import Call, Unsupported, meta_of
from torchneuron.adaptive_eager.swapin import SwapIn
from torchneuron.device._registration import keep_dispatch_rule_answers
from torchneuron.device.tensor import NeuronTensor
from torchneuron.dispatch import run_op
from torchneuron.dispatch.oprecord import OpRecord, _records, record
from torchneuron.hardware import get_core, settings
from torchneuron.hardware.core import _cores

__all__ = ["AdaptiveEagerMode", "Runtime"]

log = logging.getLogger("torchneuron.adaptive_eager")
aten = torch.ops.aten
_TO_COPY, _COPY = aten._to_copy.default, aten.copy_.default
_inference_mode = torch.is_inference_mode_enabled
_NoTorchFunction = torch._C.DisableTorchFunctionSubclass
_get_value = settings.get_value
# the settings set or read in this process, by name: ``ae_max_region_ops`` (not a live row)
# is read there once per recorded op, without ``get_value``'s call once it has a value
_set_values = settings._values
_NOT_RUN = trailrun.NOT_RUN
_NO_LIFTED: list = []  # (a trail's op has no lifted floats: the check never appends)


def _device_index(args: tuple, kwargs: dict) -> int | None:
    for a in args:
        if isinstance(a, NeuronTensor):
            return a._device_index
        if isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, NeuronTensor):
                    return b._device_index
    for v in kwargs.values():
        if isinstance(v, NeuronTensor):
            return v._device_index
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type == "neuron":
        return torch.device(dev).index or 0
    return None


def _is_read(func: Any, args: tuple, kwargs: dict, rec: OpRecord | None = None) -> bool:
    """Ops that hand device values to the host (or take host data): region boundaries.
    ``rec``: ``record(func)`` if the caller has it."""
    if rec is None:
        rec = record(func)
    if rec.reads:
        return True
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type != "neuron":
        return True
    return rec.is_copy and not isinstance(args[0], NeuronTensor)


def _described(func: Any, args: tuple, kwargs: dict) -> tuple | None:
    """The op, its arguments' metadata and scalars (``static_of``), or None."""
    try:
        return func, static_of(func, args, kwargs)[0]
    except Unsupported:
        return None


def _written(written: tuple, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The neuron tensors among the arguments at ``written`` (``OpRecord.written``)."""
    out = []
    for pos, name in written:
        v = args[pos] if pos < len(args) else kwargs.get(name)
        for t in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(t, NeuronTensor):
                out.append(t)
    return out


class Runtime(Ledger):
    """All state of adaptive eager in this process (the ledger), and the op path."""

    def __init__(self) -> None:
        super().__init__()
        self.lifecycle = Lifecycle(self)
        self.detector = Detector(self, self.lifecycle)
        self.swapin = SwapIn(self, self.lifecycle, self.detector)

    # --- the op path ------------------------------------------------------------------------
    def on_op(self, func: Any, args: tuple, kwargs: dict) -> Any:
        # ``_device_index``: most ops' first argument is a neuron tensor (no call then)
        a = args[0] if args else None
        index = a._device_index if type(a) is NeuronTensor else _device_index(args, kwargs)
        if index is None:
            return func(*args, **kwargs)
        composite_view = False
        if _inference_mode() and func.is_view and isinstance(a, torch.Tensor) \
                and not a.is_inference():
            composite_view = record(func).composite
            if not composite_view:
                # A view of a normal tensor is a normal tensor, in inference mode too,
                # and PyTorch gives it its base's version counter after we return: a
                # deferred (pending) wrapper made in inference mode would be an inference
                # tensor, which has none ("Cannot set version_counter for inference
                # tensor"). As the eager path does, make it outside inference mode,
                # grad mode kept off.
                with torch.inference_mode(False), torch.no_grad():
                    return self.on_op(func, args, kwargs)
        # ``with self.lock:``, without the ``with``: its two special-method lookups make a
        # bound method each, about 1,100 instructions an op more than these two calls
        lock = self.lock
        lock.acquire()
        try:
            self.index = index
            # only these two copy host data in (the check's first step, without its call)
            if (func is _TO_COPY or func is _COPY) and hostdata.is_host_to_device(func, args,
                                                                                 kwargs):
                return self.host_copy(func, args, kwargs)
            rp = self.replay
            if rp is not None:
                if rp.pos == rp.n:  # ``rp.complete``
                    rp.finish()
                else:
                    out = rp.try_defer(func, args, kwargs)
                    if out is MISMATCH:
                        out = self.swapin.switch_variant(rp, func, args, kwargs)
                    if out is not MISMATCH:
                        return out
                    if not rp.done:
                        reason = rp.exit_reason or (
                            Reason.BOUNDARY_INSIDE if _is_read(func, args, kwargs)
                            else Reason.GUARD_MISMATCH)
                        if reason is Reason.GUARD_MISMATCH:
                            rp.exit_op = _described(func, args, kwargs)
                        rp.side_exit(reason)
            rec = _records.get(id(func))  # ``record(func)``, without its call once built
            if rec is None or rec.func is not func:
                rec = record(func)
            if composite_view or rec.reads or (kwargs and _is_read(func, args, kwargs, rec)) or (
                    func is _COPY and not isinstance(args[0], NeuronTensor)):
                # (``reshape``, ``mT``, ``to`` of a normal tensor in inference mode: eager
                # decomposes them as the CPU does, so their views are recorded as views)
                self.detector.end_segment()
                return func(*args, **kwargs)
            if id(func) in self.refused.ids and self.refused.refuses(func, args, kwargs):
                return self.refused_op(func, args, kwargs)  # (ids: a hash is a Python call)
            seg = self.segment
            tr = seg.trail
            tensors = template = floats = None
            if tr is not None:  # the trail's op (``trail``) if the call is it
                n = len(seg.entries)
                op = tr[1][n] if n < len(tr[1]) else None
                if op is None or op[0] is not func:
                    op = seg.expect(func)  # (another trail, or none)
                if op is not None:
                    fn = op[5][0]  # the op's flat check (``trail.taken``, inlined)
                    if fn:
                        tensors = []
                        with _NoTorchFunction():
                            template = fn(args, kwargs, tensors, _NO_LIFTED)
                            if template is None:
                                tensors = None
                    elif fn is None:
                        got = trail.taken(op, args, kwargs)
                        if got is not None:
                            tensors, template = got
                    if tensors is None:
                        tensors, template, floats, op = self._off_trail(seg, func, args, kwargs, op)
            if tensors is not None:  # not described again
                static = op[4] if floats is None else floats  # type: ignore[index]
            else:
                op = None  # (this op in full)
                try:
                    static, _template, tensors = static_of(func, args, kwargs)
                except Unsupported:
                    self.detector.end_segment()
                    return func(*args, **kwargs)
            g = self.growing
            if g.at:
                if g.pos in g.checks:  # a pattern here (``at``)
                    kind = g.kind(func, static)
                    if kind == NEW:
                        return self.between_regions(func, args, kwargs, static, tensors)
                    if g.cut(kind) and self.segment.entries:
                        self.detector.end_segment(boundary=False)  # a run of growing ops: its own region
                else:  # ``g.cut(g.kind(func, static))``: FIXED here, never a cut
                    g.run = FIXED
            if not seg.entries:
                out = self.swapin.try_start(func, args, kwargs, static, tensors)
                if out is not MISMATCH:
                    return out
            return self.record(func, args, kwargs, static, tensors, rec, op, template, floats)
        finally:
            lock.release()

    @staticmethod
    def _off_trail(seg: Any, func: Any, args: tuple, kwargs: dict, op: tuple) -> tuple:
        """The call is not the trail's op ``op`` there (another argument): (tensors,
        template, None, op) of another trail's op there that it is (which is followed
        from then on, ``Segment.expect``); else (tensors, template, the call's ``Call``,
        op) if the trail's op there is the call but for its floats' values
        (``trail.check_floats``); else Nones (the op is recorded in full)."""
        alt = seg.expect(func, op)
        if alt is not None:
            got = trail.taken(alt, args, kwargs)
            if got is not None:
                return got[0], got[1], None, alt
            op = alt
        tr = seg.trail
        n = len(seg.entries)
        if tr is not None and n < len(tr[1]) and tr[1][n] is op:
            got = trail.check_floats(op, args, kwargs)
            if got is not None:
                return got[0], got[1], got[2], op
        return None, None, None, None

    def host_copy(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Host data entering the device (``hostdata``): runs eagerly now, never recorded;
        its result is a value from outside the region. A copy into a tensor the replay or
        segment already used ends that first."""
        if func is aten.copy_.default:
            rp = self.replay
            if rp is not None and rp.done:
                rp = None
            if hostdata.destination_used(args[0], rp, self.segment):
                if rp is not None:
                    rp.end_here(Reason.HOST_COPY_INTO_INPUT)
                else:
                    self.detector.end_segment()
        return func(*args, **kwargs)

    def between_regions(self, func: Any, args: tuple, kwargs: dict, static: tuple,
                        tensors: list[torch.Tensor]) -> Any:
        """An op whose shapes change every step (``growing``): the segment ends before
        it, and it runs eagerly, unrecorded, so that the next op is a start point."""
        self.detector.end_segment(boundary=False)
        core = get_core(self.index)
        core.host(core.profile.record_ns, "between-regions")  # matched like a recorded op
        self.counts["ops_between_regions"] += 1
        self.growing.ran_between(func, static)
        return run_eagerly(func, args, kwargs, tensors)

    def refused_op(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """An op the compiler refused in an earlier region (``refused``): the segment
        ends before it, and it runs eagerly, unrecorded, so that the next op is a start
        point."""
        self.detector.end_segment(boundary=False)
        self.refused.met(func)
        core = get_core(self.index)
        core.host(core.profile.record_ns, "between-regions")  # as if recorded
        self.counts["ops_between_regions"] += 1
        return func(*args, **kwargs)

    def record(self, func: Any, args: tuple, kwargs: dict, static: Call,
               tensors: list[torch.Tensor], rec: OpRecord, op: tuple | None = None,
               template: Any = None, floats: Call | None = None) -> Any:
        """Run the op eagerly and append it to the segment. ``op``: the trail's op the call
        was checked against (``trail.check``), appended as it is if the outputs are its
        outputs too; ``template``: the check's answer (its flat check's), if it had one.
        ``floats``: the call's ``Call`` (``static``) if it is ``op`` but for its floats'
        values (``trail.check_floats``): it runs as ``op`` would, and is appended as its
        own op. An op that is the trail's, with the trail's dataflow, runs
        on buffers with eager's facts (``trailrun``)."""
        written = None
        if rec.written and not rec.keeps_metadata:  # (add_, mul_, copy_: no metadata change)
            with _NoTorchFunction():  # (metadata reads as ``static_of``'s)
                written = [(t, meta_of(t)) for t in _written(rec.written, args, kwargs)]
        seg = self.segment
        flow = leaves = None
        out = _NOT_RUN
        core = _cores.get(self.index)  # ``get_core``, without its call once made (once:
        if core is None:  # the run on buffers charges it too)
            core = get_core(self.index)
        if template is not None:
            tr = seg.trail
            n = len(seg.entries)
            if tr is not None and n < len(tr[2]) and tr[1][n] is op:
                sig = tr[2][n]
                got = trailrun.run(seg, sig, op, args, kwargs, tensors,  # type: ignore[arg-type]
                                   template, self.index, core, floats is None)
                if got is not None:
                    flow, out, leaves = got
                    if floats is not None:  # the call's own op, with the trail op's dataflow
                        if leaves is not None:  # (its outputs are the trail op's)
                            trail_op = op
                            op = _op_of(func, floats, op[1].result, op[2])  # type: ignore[index]
                            static = op[4]  # (interned, as ``Segment.append`` answers)
                            # (its float-blind check is the trail op's, its exact one
                            # derived from it)
                            trail.inherit_checks(op, trail_op)
                            flow = (*flow[:4], _sig_of(func, op[1], op[2], sig.refs))
                        else:
                            op = flow = None
        if out is _NOT_RUN:
            for t in tensors:  # ``run_eagerly``, without its call
                if type(t) is not NeuronTensor:
                    out = func(*args, **kwargs)
                    break
            else:
                out = run_op(func, args, kwargs) if tensors else func(*args, **kwargs)
        if leaves is None:  # (else the outputs are the trail op's: ``trailrun._single``)
            if floats is not None:  # (the call's own op: appended in full)
                op = None
            try:
                struct, outs, leaves = outputs_of(out, tensors)
            except Unsupported:
                self.detector.end_segment()
                return out
            # ``trail.outputs``, without its call: the trail's op is appended as it is if
            # ``outputs_of`` describes the outputs as its outputs (interned: identities)
            if op is not None and (outs != op[2] or struct != op[1].result):
                op = None
        if written:
            with _NoTorchFunction():
                changed = any(meta_of(t) != m for t, m in written)
            if changed:  # a metadata-changing write
                self.detector.end_segment()
                return out
        tl = core.timeline
        ns = core.profile.record_ns
        if type(ns) is int and ns >= 0:  # ``tl.host(ns, "record")``, without its call
            tl.host_ns += ns
            by = tl.host_by_category
            by["record"] = by.get("record", 0) + ns
            if tl.observers:
                tl.emit("host", "record", tl.host_ns - ns, tl.host_ns)
        else:  # (a profile's own value: converted or refused there)
            tl.host(ns, "record")
        self.counts["ops_recorded"] += 1
        if op is not None:
            seg.append_op(op, tensors, leaves, flow)
        else:
            static = seg.append(func, static, struct, tensors, outs, leaves)
        # (the interned ``static``: the growing detector compares three steps' per op)
        g = self.growing  # ``g.saw(func, static)``, without its call
        if g.pos < _MAX_STEP_OPS:
            g.chunks.append((None, func, static))
        g.pos += 1
        n = len(seg.entries)
        cut = self.detector.cuts.get(n)
        if cut is not None and seg.entries[n - 1].key in cut and self.detector.try_cut(n):
            return out
        if n in PERIOD_CHECKS:
            self.detector.find_period()
        else:
            m = _set_values.get("ae_max_region_ops")
            if n >= int(m if m is not None else _get_value("ae_max_region_ops")):
                self.detector.find_period()
        return out

    def on_sync(self, index: int, kind: str) -> None:
        with self.lock:
            rp = self.replay
            if rp is not None:
                rp.end_here(Reason.SYNC_INSIDE)
            self.detector.end_segment()

    def flush(self) -> None:
        """End any replay in progress (at disable)."""
        self.on_sync(self.index, "disable")


class AdaptiveEagerMode(TorchDispatchMode):
    """Sees every aten op; hands those on neuron tensors to the runtime."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """PyTorch wraps a mode's ``__torch_dispatch__`` in ``torch._dynamo.disable``,
        so that Dynamo never traces the mode's own code; that wrapper costs several times
        the call itself, on every op. Ours turns Dynamo off itself, the same way and
        for the same extent (the frame and everything it calls), for far less."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        prior = _set_eval_frame(None)  # what ``torch._dynamo.disable`` does around a call
        try:
            if not types and (not kwargs or "device" not in kwargs):
                # no neuron tensor (``types`` lists the arguments' subclasses) and no
                # device to create on: a host op (an optimizer's CPU step count)
                return func(*args, **(kwargs or {}))
            return self.runtime.on_op(func, args, kwargs or {})
        finally:
            _set_eval_frame(prior)


# PyTorch asks for a ``torch.library`` rule of this class before every op it sees (none
# is ever registered): the answer per op is kept, four Python calls fewer per op
keep_dispatch_rule_answers(AdaptiveEagerMode)
