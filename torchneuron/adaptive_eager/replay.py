"""Deferral: a ready region replays by matching ops, returning pending tensors, and
running its executable once at the end; or side-exits to eager with eager's results.

While replaying, each op is checked against the region's next recorded op (its guard:
overload, tensor metadata, dataflow, scalar arguments, grad mode, autocast state) and,
if it matches, returns pending neuron tensors with the recorded metadata, without
running anything. In-place writes into tensors that already have buffers (parameters,
gradients, optimizer state, running statistics) are marked as deferred writes.

The region *ends* when all its ops matched and the next thing happens (another op, a
sync, a read): the executable runs once on the inputs' buffers, writes back into them,
and the pending tensors still held receive buffers (views as views of their base).
While the region's executable is still compiling, a replay is *first tier*: deferral is
the same, and at the end the deferred ops run as eager's own kernels, in order, issued as
one recorded batch (``NeuronCore.issue_recorded``): eager's numbers by construction, at
a guard per op and a batched launch instead of dispatch and launch per op.
Anything else (a mismatch, a read before the end, a live value the executable does not
return) is a *side exit*: the deferred ops run eagerly, in order, with their recorded
arguments, exactly as eager would have run them, and pending tensors get those results.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Protocol

import torch

from torchneuron.adaptive_eager import dataflow, deferred, issued, lift, overlap
from torchneuron.adaptive_eager.capture import layout_root
from torchneuron.adaptive_eager.guard import OpGuard, Output, guards_of, match
from torchneuron.adaptive_eager.reasons import Reason
from torchneuron.adaptive_eager.recorder import static_of, vid_of
from torchneuron.adaptive_eager.region import Region
from torchneuron.adaptive_eager.signature import (
    Call,
    InputRef,
    Unsupported,
    ValueRef,
)
from torchneuron.adaptive_eager.verify import reference_raised, run_checked
from torchneuron.compiler.launch import launch
from torchneuron.compiler.prepare import index_bounds
from torchneuron.device import buffers
from torchneuron.device.buffers import defer_write
from torchneuron.device.tensor import NeuronTensor, pending_layout, pending_of
from torchneuron.hardware import get_core

__all__ = ["Replay", "ReplayOwner", "MISMATCH"]

MISMATCH = object()


class ReplayOwner(Protocol):
    """Who hears how a replay ends (``swapin.SwapIn``): the replay reports each end
    through these, and never reaches into the runtime otherwise."""

    def finish_as_variant(self, rp: Replay) -> bool:
        """End ``rp`` as the replayable variant that is exactly its ops so far, if any."""
        ...

    def replay_ended(self, rp: Replay) -> None:
        """``rp`` is over (it finished or side-exits): no replay is in progress."""
        ...

    def replay_finished(self, rp: Replay) -> None:
        """``rp`` ran its region (either tier) and gave its values."""
        ...

    def replay_exited(self, rp: Replay, reason: Reason) -> None:
        """``rp`` side-exits for ``reason``; its deferred ops run eagerly next."""
        ...


_STORAGE = torch.Tensor.untyped_storage
_DATA_PTR = torch.UntypedStorage.data_ptr


def _aliased(inputs: list[torch.Tensor], plan: Any) -> bool:
    """Whether aliasing between inputs would change the region's meaning.

    The graph takes its inputs as independent values. Two inputs sharing storage are
    harmless when neither is written, or when every use of the other comes before the
    first write (autograd's saved ``weight.t()`` read in backward, then the optimizer's
    in-place update of ``weight``), or when they share no element (``overlap.meet``:
    DDP's gradient buckets, the gate chunks of a GRU's projection) and eager's kernels
    run over each as over the executable's contiguous copy (``whole_vector_rows``: a
    GRU's chunks of 32 float32 columns, not of 8): otherwise a write through one would
    be missed by the other, or a row would take eager's scalar loop where the executable
    takes its vector body, so the region runs eagerly."""
    ptrs = list(map(_DATA_PTR, map(_STORAGE, inputs)))  # (loops in C)
    if len(set(ptrs)) == len(ptrs):  # the common case: no two inputs share storage
        return False
    sharing: dict[int, list[int]] = {}  # storage -> the slots on it: linear, not pairwise
    for a, p in enumerate(ptrs):
        sharing.setdefault(p, []).append(a)
    last_ref = plan.last_ref
    for s in plan.written_slots:
        group = sharing[ptrs[s]]
        if len(group) > 1:
            first = plan.first_write[s]
            for a in group:
                if a != s and last_ref.get(a, -1) >= first and (
                        overlap.meet(inputs[a], inputs[s])
                        or not overlap.whole_vector_rows(inputs[a])
                        or not overlap.whole_vector_rows(inputs[s])):
                    return True
    return False


aten = torch.ops.aten
# A compiled gather clamps where eager raises, so the index values of these ops are checked
# before deferring (when they already exist), by the rules the compiler's own checks use.
_INDEX_CHECKS = frozenset({
    aten.embedding.default,
    aten.index_select.default,
    aten.gather.default,
    aten.nll_loss_forward.default,
    aten.multi_margin_loss.default,
    aten.multilabel_margin_loss_forward.default,
})


# Margin losses: PyTorch's own Python decomposition (at the Autograd key) runs before the
# compiler's checked one when a region is captured, so the executable cannot check their
# targets; a target this region computes is not known to be in range, so the op side-exits.
_UNCHECKED_IN_EXECUTABLES = {
    aten.multi_margin_loss.default,
    aten.multilabel_margin_loss_forward.default,
}


def _indices_in_range(func: Any, args: tuple) -> bool:
    for index, low, high, _dim, _kind, *skip in index_bounds.specs_of(func, args):
        if not isinstance(index, NeuronTensor):
            continue
        if index._buffer is None or index._pending is not None:
            # a value of this region: the executable checks it after its run
            if func in _UNCHECKED_IN_EXECUTABLES:
                return False
            continue
        if bool(index_bounds.outside(index._buffer, low, high, *skip).any()):
            return False
    return True


_NoTorchFunction = torch._C.DisableTorchFunctionSubclass
# ``with _NoTorchFunction():`` costs about 2,000 instructions (a new object, and two
# special-method lookups that each make a bound method), as much as a deferred op's
# guard check, and every op of a replay needs it (autograd's and the optimizer's ops
# reach the mode with the subclass handling on). ``try_defer`` calls the unbound methods
# on its replay's own instance (``Replay._no_tf``), about 900. Entering keeps the state
# to restore on the instance, so one instance must never be entered twice at once: a
# replay's ``try_defer`` never runs inside itself (nothing in it dispatches a neuron op).
_tf_off = _NoTorchFunction.__enter__
_tf_on = _NoTorchFunction.__exit__


def _guards(region: Region) -> list[OpGuard]:
    """``region``'s guards, each with its generated dataflow check."""
    guards = guards_of(region, _INDEX_CHECKS)
    if guards and guards[0].bind is None:
        for g in guards:
            g.bind = dataflow.generate(g.flow, _Value, Replay._bind)
    return guards


_NO_LIFTED: list = []  # the ``lifted`` list of a guard without lifted floats: stays empty
_NAN = float("nan")  # what ``float(repr(x))`` gives for every NaN x


def _accept(got: list[tuple[int, Any]], values: dict[int, float],
            dtypes: list[torch.dtype]) -> bool:
    """``lift.accept`` of the floats a guard found where the region lifted scalars: each
    (n, value) from the generated flat check holds the float itself, which is what
    ``float(repr(value))`` gives back (repr round-trips every float but NaN, whose sign
    and payload it drops: those become the plain NaN); (n, repr) from the general walk
    is parsed as ``lift.accept`` parses it. Stores the values."""
    for n, a in got:
        if type(a) is str:
            a = float(a)
        elif a != a:
            a = _NAN
        if math.isfinite(a) and abs(a) > (lift._MAX.get(dtypes[n]) or torch.finfo(dtypes[n]).max):
            return False
        values[n] = a
    return True


def _layout(out: Output, index: int) -> None:
    """Prepare ``out``'s pending tensors on device ``index`` (``tensor.pending_layout``):
    the layout's keyword arguments are built once per output, not once per replay."""
    out.layout = pending_layout(*out.meta, index)  # type: ignore[misc]
    out.layout_index = index


class _Value:
    """The producer of one pending value of a replay (``tensor.Pending``).

    Referenced only by its tensor's ``_pending`` (the replay holds it weakly,
    ``Replay.pending``), so it lives exactly as long as the tensor: a weak reference to it
    tells whether the value is still held, without a weak reference to the tensor
    (``torch.utils.swap_tensors``, used by ``Module.to``, refuses weakly referenced
    tensors). Not a reference count: which references the interpreter counts (a frame's
    locals, an argument on the stack) is its own business and changes between versions,
    and a count must guess them; a guess one off ends the region eagerly, or leaves a
    held value without its result. When the region ends the value's buffer is
    stored here (and accounted against HBM from then on); the tensor takes it on its next
    read.
    """

    __slots__ = ("replay", "ik", "result", "_memory_token", "__weakref__")

    def __init__(self, replay: Replay, ik: tuple[int, int]) -> None:
        self.replay = replay
        self.ik = ik
        self.result: torch.Tensor | None = None

    def materialize(self) -> torch.Tensor:
        if self.result is None:
            self.replay.materialize(self.ik)
        if self.result is None:
            raise RuntimeError(
                "adaptive eager: this tensor's value was never computed, because an earlier "
                "deferred op raised an error (see that error); recompute it eagerly")
        return self.result

    def give(self, buffer: torch.Tensor, index: int) -> None:
        self.result = buffer
        buffers.track(self, buffer, index)


_new_value = object.__new__
_ref = weakref.ref


class _Write:
    """A deferred in-place write into a tensor that has a buffer (``buffers.defer_write``).

    Holds its replay weakly: the replay holds it, and a cycle would leave each ended
    replay, with its lists of arguments and the tensors only they still hold, to the
    garbage collector (a full collection every few hundred steps of a transformer, and
    their simulated memory counted until then). The marks are gone when the replay ends
    (``_release_marks``), so a replay that no longer exists has nothing to write."""

    __slots__ = ("replay",)

    def __init__(self, replay: Replay) -> None:
        self.replay = weakref.ref(replay)

    def materialize(self) -> None:
        replay = self.replay()
        if replay is not None:
            replay.materialize(None)


class Replay:
    """One replay of a ready region."""

    def __init__(self, runtime: ReplayOwner, region: Region, index: int, tier: int = 2) -> None:
        self.runtime = runtime
        self.region = region
        self.tier = tier  # 1: the recorded eager kernels at the end; 2: the executable
        self.plan = region.plan
        self.index = index
        self.core = get_core(index)
        self.started_ns = self.core.now  # the replay's start on the profiler's trace
        self.pos = 0
        self.n = len(region.sigs)  # ops of the region: complete when ``pos`` reaches it
        self.slots: dict[int, int] = {}
        self.ext: list[torch.Tensor] = []
        # each input's buffer when first used: the region reads these, whatever buffer the
        # wrapper holds later (``.data =`` or ``swap_tensors`` mid-region, as eager would)
        self.ext_buffers: list[torch.Tensor] = []
        # each pending value of this replay (``_Value``), weakly: gone when its tensor is
        self.pending: dict[tuple[int, int], weakref.ref] = {}
        # the deferred ops, flat (no container per op: they live until the region ends,
        # and a container apiece made the garbage collector run every step)
        # the argument template of each deferred op (``signature.rebuild``); its overload
        # and tensor arguments are its guard's (``OpGuard.func``, ``flow``)
        self.templates: list[Any] = []
        self.marked: list[torch.Tensor] = []
        self.write = _Write(self)  # the mark of every deferred write of this replay
        self.done = False
        self.missing: set[tuple[int, int]] = set()  # live values the plan lacks
        self.exit_reason: Reason | None = None  # set when a guard fails for a known reason
        self.exit_op: Any = None  # the op that mismatched, described (``Runtime.on_op``)
        self.scalars: dict[int, float] = {}  # lifted scalar n -> this replay's value
        # deferred op -> the user's line that issued it, for ops that may raise at the end
        self.issued: dict[int, issued.Issued | None] = {}
        self.guards = _guards(region)
        self._timeline = self.core.timeline  # charged a guard per op (``try_defer``)
        self._no_tf = _NoTorchFunction()  # entered by ``try_defer`` (``_tf_off``)

    @property
    def complete(self) -> bool:
        return self.pos == self.n

    def adopt(self, region: Region, tier: int = 2) -> None:
        """Go on as a replay of ``region``, another variant from the same start whose
        signatures up to ``pos`` are this region's (``SwapIn.switch_variant``): the ops
        deferred so far matched it too, with the same input slots, value ids and lifted
        scalar numbers. Input slots a failed check of the op at ``pos`` handed out are
        taken back first."""
        used = 1 + max((w for g in self.guards[:self.pos] for w in g.flow if type(w) is int),
                       default=-1)
        for t in self.ext[used:]:
            del self.slots[vid_of(t)]
        del self.ext[used:]
        del self.ext_buffers[used:]
        self.exit_reason = None
        self.region = region
        self.tier = tier
        self.n = len(region.sigs)
        self.plan = region.plan
        self.guards = _guards(region)

    # --- deferral -------------------------------------------------------------------------
    def try_defer(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Pending results of ``func`` if it matches the next recorded op, else MISMATCH."""
        g = self.guards[self.pos]
        if func is not g.func:  # the overload first: the cheapest way to refuse
            return MISMATCH
        # Below the tensor subclass's ``__torch_function__``: every metadata read of a
        # neuron tensor (sizes, strides, offset, dtype) is then a plain C call, a third
        # of its cost through the default handler, with the same answer. (``with
        # _NoTorchFunction()``, without the ``with``: see ``_tf_off``.)
        no_tf = self._no_tf
        _tf_off(no_tf)
        try:
            tensors: list[torch.Tensor] = []
            # (a list only for a guard with lifted floats: the others never append)
            got: list[tuple[int, str]] = [] if g.lifts else _NO_LIFTED
            check = g.check  # ``match``, without its call when the guard has a flat check
            template = (check(args, kwargs, tensors, got) if check is not None
                        else match(g, args, kwargs, tensors, got))
            if template is None:  # not the guard's quick yes: the general check decides
                try:
                    static, template, tensors = static_of(func, args, kwargs)
                except Unsupported:
                    return MISMATCH
                if static != g.static and not self._lifted_match(static, g.static):
                    return MISMATCH
                write_at = None  # the call's arity is not known to be the recorded one
            else:
                if got and not _accept(got, self.scalars, self.plan.lifted):
                    return MISMATCH
                write_at = g.write_at
            if not g.bind(self, tensors):  # ``_bind``, generated for this op's flow
                return MISMATCH
            if g.check_indices and not _indices_in_range(func, args):
                self.exit_reason = Reason.INDEX_OUT_OF_RANGE
                return MISMATCH
            self.pos += 1
            # the guard's host charge: ``Timeline.host(ns, "guard")``, inline (a call
            # fewer per op) when no observer sees it and the cost is a plain int
            tl = self._timeline
            ns = self.core.profile.guard_check_ns
            if tl.observers or type(ns) is not int or ns < 0:
                tl.host(ns, "guard")
            else:
                tl.host_ns += ns
                cats = tl.host_by_category
                cats["guard"] = cats.get("guard", 0) + ns
            templates = self.templates
            if g.raises_later:
                self.issued[len(templates)] = issued.user_line()
            templates.append(template)
            if g.written:
                if write_at is None:
                    self._mark_written(g, args, kwargs)
                else:
                    for at in write_at:
                        t = args[at] if type(at) is int else kwargs[at]
                        if type(t) is NeuronTensor:  # (``_mark`` of one tensor, inline)
                            if t._pending is None:
                                defer_write(t, self.write)
                                self.marked.append(t)
                        else:
                            self._mark(t)
            out = g.new
            if out is not None:  # a single new value (``_new``, inlined): most ops
                value = _new_value(_Value)  # ``_Value(self, out.ik)``, without its frame
                value.replay = self
                value.ik = out.ik
                value.result = None
                self.pending[out.ik] = _ref(value)  # type: ignore[index]
                index = self.index
                if out.layout_index != index:
                    _layout(out, index)
                return pending_of(out.meta[0], out.layout, index, value)  # type: ignore[index, arg-type]
            struct = g.struct
            if struct == "single":
                out = g.outputs[0]
                return None if out is None else tensors[out.same]  # type: ignore[index]
            if struct == "none":
                return None
            results = [None if out is None else tensors[out.same] if out.same is not None
                       else self._new(out) for out in g.outputs]
            return tuple(results) if struct == "tuple" else results
        finally:
            _tf_on(no_tf, None, None, None)

    def _mark_written(self, g: OpGuard, args: tuple, kwargs: dict) -> None:
        """Mark the tensors with buffers that the deferred op writes (deferred writes)."""
        for pos, name in g.written:
            self._mark(args[pos] if pos < len(args) else kwargs.get(name))

    def _mark(self, v: Any) -> None:
        """Mark argument ``v`` (a tensor, or a list of them) as written, if it has a buffer."""
        for t in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(t, NeuronTensor) and t._pending is None:
                buffers.defer_write(t, self.write)
                self.marked.append(t)

    def _new(self, out: Output) -> torch.Tensor:
        """A new pending tensor for output ``out`` of a deferred op."""
        value = _Value(self, out.ik)  # type: ignore[arg-type]
        self.pending[out.ik] = _ref(value)  # type: ignore[index]
        index = self.index
        if out.layout_index != index:
            _layout(out, index)
        return pending_of(out.meta[0], out.layout, index, value)  # type: ignore[index, arg-type]

    def _bind(self, tensors: list[torch.Tensor], flow: tuple) -> bool:
        """Whether the op's tensor arguments are the values the recorded dataflow says
        (this replay's pending values, or input slots in order of first use, each still
        on the buffer it had then): then they are exactly ``flow``, which is what the
        deferred run takes them from (``deferred.run``). A new input is given the next
        slot (a mismatch after it ends the replay, or ``adopt`` takes it back)."""
        if len(tensors) != len(flow):
            return False
        slots = self.slots
        for t, want in zip(tensors, flow, strict=True):
            p = t._pending
            if type(p) is _Value:
                if p.replay is self:
                    ik = p.ik
                    if ik is not want and ik != want:
                        break
                    continue
                _ = t.buffer  # a value of an earlier, ended replay: take its buffer now
            buf = t._buffer
            if buf is None:
                break
            v = t.__dict__.get("_ae_vid")  # ``vid_of(t)``, without the call when known
            vid = v[0] if v is not None and v[1] == id(t) else vid_of(t)
            slot = slots.get(vid)
            if slot is None:
                if t._device_index != self.index:
                    break  # an input on another device: eager raises, at the side exit
                slot = slots[vid] = len(slots)
                self.ext.append(t)
                self.ext_buffers.append(buf)
            elif buf is not self.ext_buffers[slot]:
                break  # its buffer was replaced since its first use
            if slot != want:
                break
        else:
            return True
        return False

    def _lifted_match(self, static: Call, static_r: Call) -> bool:
        found = self.plan.lift_at.get(self.pos)
        return found is not None and lift.guard(static, static_r, found, self.scalars,
                                                 self.plan.lifted)

    # --- the end --------------------------------------------------------------------------
    def materialize(self, ik: tuple[int, int] | None) -> None:
        """A read of a pending value (or of a tensor with a deferred write): the region
        ends here if complete, otherwise it side-exits."""
        if not self.done:
            self.end_here(Reason.EARLY_READ)

    def end_here(self, reason: Reason) -> None:
        """The stream reached a boundary inside the region (a read, a sync, a host copy
        into an input): finish if every op was deferred, else as the ready variant that
        stops exactly here (``ReplayOwner.finish_as_variant``), else side-exit for ``reason``."""
        if self.complete:
            self.finish()
        elif not self.runtime.finish_as_variant(self):
            self.side_exit(reason)

    def _release_marks(self) -> None:
        for t in self.marked:
            if type(t._pending) is _Write:
                t._pending = None
        self.marked.clear()

    def _live(self) -> list[tuple[tuple[int, int], _Value]]:
        """The pending values still held (alive) and without a result."""
        out = []
        for ik, ref in self.pending.items():
            v = ref()
            if v is not None and v.result is None:
                out.append((ik, v))
        return out

    def finish(self) -> None:
        """End of the region: run the executable once, give live values their buffers."""
        self.done = True
        self.runtime.replay_ended(self)
        self._release_marks()
        if self.tier == 1:
            with self.core.issue_recorded():
                self._run_deferred()
            self.runtime.replay_finished(self)
            return
        plan = self.plan
        live = self._live()
        self.missing = {root.value for root in (plan.roots[ik] for ik, _ in live)
                        if isinstance(root, ValueRef) and root.value not in plan.out_index}
        if self.missing:
            self._eager(Reason.LIVE_VALUE_NOT_OUTPUT)
            return
        inputs = list(self.ext_buffers)
        if plan.written_slots and _aliased(inputs, plan):
            self._eager(Reason.ALIASED_INPUTS)
            return
        if plan.written_slots and not all(overlap.whole_vector_rows(inputs[s])
                                          for s in plan.written_slots):
            self._eager(Reason.SHORT_ROWS_WRITTEN)
            return
        try:
            with deferred.no_modes():
                outs = run_checked(self.region,
                                   inputs + lift.scalar_inputs(plan.lifted, self.scalars),
                                   lambda a: launch(self.region.executable, a, self.core,
                                                    self.index, 0), self.index)
        except Exception as e:
            # An index the region computed is out of range (the executable's check), or
            # the first replay's eager reference raised: nothing was written back. Eager's
            # way from the unchanged inputs: the writes before the failing op, its error.
            if index_bounds.raised_by_index_check(e):
                self._eager(Reason.INDEX_OUT_OF_RANGE)
            elif reference_raised(e):
                self._eager(Reason.REFERENCE_RAISED)
            else:
                raise
            return
        roots: dict[tuple[int, int], torch.Tensor] = {}
        for n, v in enumerate(plan.outputs):
            roots[v] = layout_root(outs[n], plan.metas[v], plan.root_nbytes[v])
        for ik, v in live:
            root = plan.roots[ik]
            base = inputs[root.index] if isinstance(root, InputRef) else roots[root.value]
            if isinstance(root, ValueRef) and root.value == ik:
                buf = base
            else:
                m = plan.metas[ik]
                buf = base.as_strided(m.shape, m.stride, m.offset)  # type: ignore[union-attr]
            v.give(buf, self.index)  # type: ignore[arg-type]
        self.pending.clear()
        self.runtime.replay_finished(self)

    def side_exit(self, reason: Reason) -> None:
        """Leave the region: run the deferred prefix eagerly, in order."""
        self.done = True
        self.runtime.replay_ended(self)
        self._release_marks()
        self._eager(reason)

    def _eager(self, reason: Reason) -> None:
        self.runtime.replay_exited(self, reason)
        self._run_deferred()

    def _run_deferred(self) -> None:
        """Run the deferred ops eagerly, in order (``deferred.run``)."""
        deferred.run(self)
