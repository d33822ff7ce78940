"""The runtime: the dispatch mode, the segment, region detection, swap-in and replays.

Every aten op on neuron tensors passes through ``AdaptiveEagerMode`` (after autograd, so
backward and optimizer ops too, and factory ops with ``device="neuron"``). Not replaying,
an op runs eagerly and is recorded into the *segment*; a sync, a read or an op that
cannot be deferred ends the segment, which is then counted as an instance of the region
with its signature. Host-to-device copies run eagerly and stay inside (``hostdata``).
Segments that differ only in float scalars (AdamW's bias corrections, a scheduled learning
rate) count as one region with those scalars lifted to inputs (``lift``); a segment that
differs from the previous one from the same start only after a common prefix counts that
prefix as a region too; a sync-free stream is searched for its period. Back-to-back copies
of a block (identical layers, see ``repeats``) are split out of a segment as one region,
the pieces around them as regions of their own, each ending in a *cut* where later
segments are closed, so that replays chain piece after piece. A region seen
``ae_hot_threshold`` times (in different steps) is captured and compiled in the
background; at a start point (the segment is empty), the
longest ready region whose first op matches and whose modeled compile has finished on the
simulated clock replays. Several regions may share that first op (a block's forward
followed by the next block, and the last block's; AdamW's update of a block and of the
other parameters), and which one the stream is shows only ops later: a replay whose next
op mismatches goes on as another ready variant from its start that agrees with it on
every op so far, or ends as the one that stops there (``switch_variant``), before it
side-exits.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

import torch
from torch._C._dynamo.eval_frame import set_eval_frame as _set_eval_frame
from torch.utils._python_dispatch import TorchDispatchMode

from torchneuron.adaptive_eager import background, hostdata, repeats
from torchneuron.adaptive_eager.capture import (
    CaptureRefused,
    build_graph,
    example_inputs,
    plan_region,
)
from torchneuron.adaptive_eager.growing import NEW, Growing
from torchneuron.adaptive_eager.lift import (
    Lifter,
    block_identity,
    floats_only_differ,
    may_lift,
    skeleton,
)
from torchneuron.adaptive_eager.reasons import Reason
from torchneuron.adaptive_eager.recorder import Segment, outputs_of, run_eagerly, static_of
from torchneuron.adaptive_eager.refused import RefusedOps
from torchneuron.adaptive_eager.region import Region, State
from torchneuron.adaptive_eager.replay import MISMATCH, Replay
from torchneuron.adaptive_eager.signature import Unsupported, meta_of, region_key
from torchneuron.compiler.launch import compile_latency_ns
from torchneuron.device.tensor import NeuronTensor
from torchneuron.dispatch.opfacts import op_facts
from torchneuron.dispatch.oprecord import record
from torchneuron.hardware import get_core, program_compile_latency_ns, settings

__all__ = ["AdaptiveEagerMode", "Runtime"]

log = logging.getLogger("torchneuron.adaptive_eager")
aten = torch.ops.aten
_TO_COPY, _COPY = aten._to_copy.default, aten.copy_.default
_inference_mode = torch.is_inference_mode_enabled
# A segment this long without a sync is searched for its period (then four times per
# doubling: 320, 384, 448, 512, 640, ...): short sync-bounded steps are never cut by a
# chance repetition of a few ops, and a loop that never syncs is found about one step
# after its third copy.
_PERIOD_CHECKS = frozenset(2 ** n + j * 2 ** (n - 2) for n in range(8, 20) for j in range(4))
_MIN_PERIOD = 4  # ops
_REPEATS = 3  # a period must repeat this many times back to back
_RECAPTURES = 2  # recaptures of a region for values held at its end that it lacks
_MIN_BLOCK = 8  # ops: the shortest block split out of a segment as a repeated region
_LOOP_COPIES = 8  # back-to-back copies that make a block a loop's body, not layers


def _setting(name: str) -> int:
    return int(settings.get_value(name))


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


def _is_read(func: Any, args: tuple, kwargs: dict) -> bool:
    """Ops that hand device values to the host (or take host data): region boundaries."""
    facts = op_facts(func)
    if facts.returns_host_values or not facts.returns_tensors_only:
        return True
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type != "neuron":
        return True
    return func is aten.copy_.default and not isinstance(args[0], NeuronTensor)


class Runtime:
    """All state of adaptive eager in this process."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.segment = Segment()
        self.regions: dict[str, Region] = {}
        self.by_start: dict[tuple, list[Region]] = {}
        self.last_by_start: dict[tuple, tuple] = {}
        # region length -> keys of the last op of regions that end a piece of a split
        # segment (a repeated block, or the piece before one): the segment is cut there
        self.cuts: dict[int, set[int]] = {}
        self.epoch = 0  # boundaries seen (a sync, a read, host data): steps, roughly
        self.epoch_pos = 0  # the stream position (ops) where the current epoch began
        self.longest_epoch = 0  # ops of the longest epoch that ended
        self.at_boundary = False  # closing a segment that ended at a boundary
        self.block_keys: dict[tuple, dict[str, int]] = {}  # start -> block key -> epoch seen
        self.block_inputs: dict[str, set[int]] = {}  # block region key -> its last inputs' vids
        self.lifter = Lifter()
        self.replay: Replay | None = None
        self.counts: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.growing = Growing(self.reasons)  # ops whose shapes change every step: eager
        self.refused = RefusedOps()  # ops the compiler refuses in any region: eager
        self.index = 0
        self.wall_stall_s = 0.0

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
        with self.lock:
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
                        out = self.switch_variant(rp, func, args, kwargs)
                    if out is not MISMATCH:
                        return out
                    if not rp.done:
                        reason = rp.exit_reason or (
                            Reason.BOUNDARY_INSIDE if _is_read(func, args, kwargs)
                            else Reason.GUARD_MISMATCH)
                        if reason is Reason.GUARD_MISMATCH:
                            rp.exit_op = _described(func, args, kwargs)
                        rp.side_exit(reason)
            if composite_view or _is_read(func, args, kwargs):
                # (``reshape``, ``mT``, ``to`` of a normal tensor in inference mode: eager
                # decomposes them as the CPU does, so their views are recorded as views)
                self.end_segment()
                return func(*args, **kwargs)
            refused = self.refused.ops  # a plain dict: no Python call per op
            if refused and func in refused:
                return self.refused_op(func, args, kwargs)
            try:
                static, _template, tensors = static_of(func, args, kwargs)
            except Unsupported:
                self.end_segment()
                return func(*args, **kwargs)
            if self.growing.at:
                kind = self.growing.kind(func, static)
                if kind == NEW:
                    return self.between_regions(func, args, kwargs, static, tensors)
                if self.growing.cut(kind) and self.segment.entries:
                    self.end_segment(boundary=False)  # a run of growing ops: its own region
            if not self.segment.entries:
                out = self.try_start(func, args, kwargs, static, tensors)
                if out is not MISMATCH:
                    return out
            return self.record(func, args, kwargs, static, tensors)

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
                    self.end_segment()
        return func(*args, **kwargs)

    def between_regions(self, func: Any, args: tuple, kwargs: dict, static: tuple,
                        tensors: list[torch.Tensor]) -> Any:
        """An op whose shapes change every step (``growing``): the segment ends before
        it, and it runs eagerly, unrecorded, so that the next op is a start point."""
        self.end_segment(boundary=False)
        core = get_core(self.index)
        core.host(core.profile.record_ns, "between-regions")  # matched like a recorded op
        self.counts["ops_between_regions"] += 1
        self.growing.ran_between(func, static)
        return run_eagerly(func, args, kwargs, tensors)

    def refused_op(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """An op the compiler refused in an earlier region (``refused``): the segment
        ends before it, and it runs eagerly, unrecorded, so that the next op is a start
        point."""
        self.end_segment(boundary=False)
        core = get_core(self.index)
        core.host(core.profile.record_ns, "between-regions")  # as if recorded
        self.counts["ops_between_regions"] += 1
        return func(*args, **kwargs)

    def record(self, func: Any, args: tuple, kwargs: dict, static: tuple,
               tensors: list[torch.Tensor]) -> Any:
        written = [(t, meta_of(t)) for t in _written(func, args, kwargs)]
        out = run_eagerly(func, args, kwargs, tensors)
        try:
            struct, outs, leaves = outputs_of(out, tensors)
        except Unsupported:
            self.end_segment()
            return out
        if any(meta_of(t) != m for t, m in written):  # a metadata-changing write
            self.end_segment()
            return out
        core = get_core(self.index)
        core.host(core.profile.record_ns, "record")
        self.counts["ops_recorded"] += 1
        self.growing.saw(func, static)
        seg = self.segment
        seg.append(func, static + (struct,), tensors, outs, leaves)
        n = len(seg)
        cut = self.cuts.get(n)
        if cut is not None and seg.entries[n - 1].period_key() in cut and self.try_cut(n):
            return out
        if n in _PERIOD_CHECKS or n >= _setting("ae_max_region_ops"):
            self.find_period()
        return out

    # --- segments and regions ---------------------------------------------------------------
    def end_segment(self, boundary: bool = True) -> None:
        seg = self.segment
        if seg.entries:
            self.at_boundary = boundary
            try:
                self.close_split(0, len(seg))
            finally:
                self.at_boundary = False
        if boundary:
            pos = self._pos()
            self.growing.step_ended()
            self.longest_epoch = max(self.longest_epoch, pos - self.epoch_pos)
            self.epoch += 1
            self.epoch_pos = pos
        seg.clear()

    def _pos(self) -> int:
        """Ops seen so far, recorded or replayed (side-exited ops aside)."""
        return self.counts["ops_recorded"] + self.counts["ops_deferred"]

    def _sync_free(self, copies: int, copies_count: bool = True, carried: bool = False) -> bool:
        """Whether the stream runs without boundaries, so that each sighting counts: a
        block repeated ``copies >= _LOOP_COPIES`` times back to back (a loop's body), or
        a stream that has gone 4x longer than any step before and at least
        ``ae_max_region_ops`` ops without a boundary. (Until then, the first step of a
        loop that syncs once per step looks the same as a stream that never syncs.)
        ``copies_count``: False for copies alike in liftable floats, which the first step
        of such a loop shows (AdamW's update of each layer): those need 4x the copies.
        ``carried``: the copies share an input tensor they update (``_carried``): a loop's
        iterations as soon as the period is found (``_REPEATS`` copies)."""
        if self.at_boundary:
            return False
        if carried and copies >= _REPEATS:
            return True
        if copies >= (_LOOP_COPIES if copies_count else 4 * _LOOP_COPIES):
            return True
        run = self._pos() - self.epoch_pos
        return run > 4 * self.longest_epoch and run >= _setting("ae_max_region_ops")

    def close_split(self, s: int, e: int, cut_end: bool = False) -> None:
        """Close window [s, e) of the segment: each run of back-to-back copies of a block
        (the layers of a model, see ``repeats``) as one region, the pieces between as
        regions of their own. Every piece that ends before ``e`` (or at it, with
        ``cut_end``) becomes a cut point: from then on a segment that is exactly that
        piece ends there, so the next piece can start replaying at the next op."""
        pieces = repeats.split(self.segment.keys(), s, e, _MIN_BLOCK, self._accept_block)
        for piece in pieces:
            if piece.copies > 1:
                self.close_window(piece.start, piece.start + piece.period, seen=piece.copies,
                                  block=piece, cut=True)
            else:
                self.close_window(piece.start, piece.end, cut=piece.end < e or cut_end)

    def _accept_block(self, rep: repeats.Repeat, lo: int, hi: int) -> repeats.Repeat | None:
        """A tandem repeat of window [lo, hi) as a region of its own: the leading copies
        with the same dataflow (the keys leave it out), if a replay of the block gains and
        the split compiles less than the window whole (the modeled latency, base plus per
        op, of the block and the pieces beside it against the whole; on the profile's
        figures even when latency is off, so the split is the same either way).

        A block that changes from step to step is refused (it would never replay, and
        the pieces split off around it would each leave a common prefix to compile);
        changing liftable floats do not count as a change (``_block_key``)."""
        p = get_core(self.index).profile
        if _gain(p, rep.period) <= _setting("ae_min_gain_ns") or not _pays(p, rep, lo, hi):
            return None
        seg = self.segment
        first, _ = seg.relative(rep.start, rep.start + rep.period)
        block_key = _block_key(first)
        if self._changes_by_step(block_key):
            return None
        copies = 1
        while copies < rep.copies:
            a = rep.start + copies * rep.period
            if seg.relative(a, a + rep.period)[0] != first:
                break
            copies += 1
        rep = repeats.Repeat(rep.start, rep.period, copies)
        if copies < 2 or not _pays(p, rep, lo, hi):
            return None
        self._known_block(block_key)
        return rep

    def _changes_by_step(self, block_key: tuple[tuple, str]) -> bool:
        """Whether a block from the same start, seen in an earlier step, was different
        (and this one is new): the block changes from step to step."""
        start, key = block_key
        known = self.block_keys.get(start, {})
        return key not in known and any(ep < self.epoch for ep in known.values())

    def _known_block(self, block_key: tuple[tuple, str]) -> None:
        start, key = block_key
        self.block_keys.setdefault(start, {}).setdefault(key, self.epoch)

    def close_window(self, s: int, e: int, periodic: bool = False, seen: int = 1,
                     block: repeats.Repeat | None = None, cut: bool = False) -> Region | None:
        """Count window [s, e) as ``seen`` instances of its region; ``block``: the window
        is the first of that many back-to-back copies (liveness from all of them)."""
        sigs, slot_vids = self.segment.relative(s, e)
        windows = [(s, e)] if block is None else [
            (block.start + j * block.period, block.start + (j + 1) * block.period)
            for j in range(block.copies)]
        # Values alive at the window's end are the graph's outputs: known exactly only when
        # the window ends the segment now (a value freed since then, unread by any op,
        # is still held at a replay's end: autograd's seed gradient, for one)
        exact = windows[-1][1] == len(self.segment)
        lifted, also_seen = self.lifter.lift(sigs)  # changing float scalars as inputs
        # copies with liftable floats all alike: layers of one step (AdamW's update of
        # each), not yet known to be a loop's body
        carried = block is not None and self._carried(sigs, windows)
        alike = block is not None and lifted is None and may_lift(sigs) and not carried
        region = self.note(lifted or sigs, s, e, periodic, seen, windows=windows,
                           block=block is not None, exact=exact, earlier=also_seen, alike=alike,
                           carried=carried)
        if region is not None:
            if cut and not region.cut:
                region.cut = True
                self.cuts.setdefault(e - s, set()).add(self.segment.entries[e - 1].period_key())
        if block is not None:  # identical copies: no changing prefix to find
            return region
        start = _start_key(sigs[0])
        prev = self.last_by_start.get(start)
        self.last_by_start[start] = sigs
        if lifted is None and prev is not None and prev != sigs:
            n = _common_prefix(prev, sigs)
            if 2 <= n < min(len(prev), len(sigs)):
                self.note(sigs[:n], s, s + n, False, 1, prefix=True)
        return region

    def _carried(self, sigs: tuple, windows: list[tuple[int, int]]) -> bool:
        """Whether back-to-back copies of a block share an input tensor (the parameters,
        optimizer state or accumulator a loop updates in place): iterations of a loop
        that never syncs, whose floats stay alike because they are constants (SGD's lr,
        momentum), not the layers of one step, each with tensors of its own (AdamW's
        per-parameter update, whose bias corrections change next step). The previous
        sighting stands in for the copy before the first window."""
        seg = self.segment
        sets = [set(seg.relative(a, b)[1]) for a, b in windows]
        key = region_key(sigs)
        prev = self.block_inputs.get(key)
        self.block_inputs[key] = sets[-1]
        if prev is not None:
            sets.insert(0, prev)
        return len(sets) > 1 and all(x & y for x, y in zip(sets, sets[1:], strict=False))

    def note(self, sigs: tuple, s: int, e: int, periodic: bool, seen: int,
             prefix: bool = False, windows: list[tuple[int, int]] | None = None,
             block: bool = False, exact: bool = True, earlier: int = 0,
             alike: bool = False, carried: bool = False) -> Region | None:
        """Count a sighting of the region of ``sigs`` (window [s, e) of the segment); make
        it hot once seen often enough, at a sighting whose live values are ``exact``.
        ``earlier``: it also stands for that many sightings in earlier steps (a newly
        lifted region)."""
        key = region_key(sigs)
        region = self.regions.get(key)
        if region is None:
            start = _start_key(sigs[0])
            variants = self.by_start.setdefault(start, [])
            if len(variants) >= _setting("ae_max_variants") * 4:
                self.reasons[Reason.TOO_MANY_VARIANTS.value] += 1
                return None
            region = self.regions[key] = Region(key, sigs, periodic)
            variants.append(region)
            self.counts["regions_detected"] += 1
        elif prefix and region.state is State.RECORDING:
            # Seen again as a prefix only: the full segments from this start keep
            # changing after it (a changing scalar, say). A prefix first found is counted
            # once, so that a full segment that does repeat is compiled before it.
            pass
        if self.growing.at:
            self.growing.started(region.key, len(self.segment), windows or [(s, e)])
        region.times_seen += seen + earlier
        region.hot_count += earlier
        # Hotness counts one sighting per step (the ops between two boundaries): copies
        # of a block inside one step (the layers) are identical even where the steps
        # differ (AdamW's bias corrections). In a stream without boundaries each sighting
        # counts: its periods are its steps.
        same_step = region.epoch == self.epoch
        sync_free = self._sync_free(region.in_step + seen if block and same_step else seen,
                                    copies_count=not alike, carried=carried)
        if sync_free:
            region.hot_count += seen
        elif not same_step:
            region.hot_count += 1
        if block:
            _count_copies(region, seen, self.epoch, sync_free)
        region.epoch = self.epoch
        if (exact and region.state is State.RECORDING
                and region.hot_count >= _setting("ae_hot_threshold")):
            self.make_hot(region, s, e, windows or [(s, e)])
        return region

    def make_hot(self, region: Region, s: int, e: int, windows: list[tuple[int, int]]) -> None:
        """Capture the region from window [s, e) and compile it. Its graph returns the
        values that may be used after any of ``windows`` (its instances in the segment:
        the copies of a repeated block need the same outputs)."""
        seg = self.segment

        def inputs_and_live() -> tuple[list[tuple], set[tuple[int, int]]]:
            _, slot_vids = seg.relative(s, e)
            return (_input_metas(seg, s, e, len(slot_vids)),
                    set().union(*(seg.live_at(a, b) for a, b in windows)))

        self.capture(region, inputs_and_live)

    def capture(self, region: Region, inputs_and_live: Any) -> None:
        """Make the region hot and compile it, unless the variants from its start are at
        their cap or a replay would not pay; ``inputs_and_live()``: its input slots'
        metadata and the values live after it (the graph's outputs)."""
        region.to(State.HOT)
        core = get_core(self.index)
        region.hot_at_ns = core.now
        compiled = sum(1 for r in self.by_start[_start_key(region.sigs[0])]
                       if r.state in (State.COMPILING, State.READY))
        if compiled >= _setting("ae_max_variants"):
            region.to(State.ABORTED, Reason.TOO_MANY_VARIANTS)
            self.reasons[Reason.TOO_MANY_VARIANTS.value] += 1
            return
        p = core.profile
        n = len(region)
        gain = _gain(p, n)
        if gain <= _setting("ae_min_gain_ns"):
            region.to(State.ABORTED, Reason.NO_GAIN, f"predicted saving {gain} ns per replay")
            self.reasons[Reason.NO_GAIN.value] += 1
            return
        try:
            metas, live = inputs_and_live()
            plan = plan_region(region.sigs, len(metas), metas, live)
            gm = build_graph(region.sigs, plan)
        except (CaptureRefused, Exception) as err:  # noqa: BLE001 - refused, never wrong
            region.to(State.ABORTED, Reason.CAPTURE_FAILED, f"{type(err).__name__}: {err}")
            self.reasons[Reason.CAPTURE_FAILED.value] += 1
            self.refused.learn(err, (sig[0] for sig in region.sigs))  # an op's own: eager
            return
        self.compile_region(region, plan, gm, core)

    def exit_variant(self, region: Region, k: int) -> bool:
        """Replays of ``region`` side-exit at its op ``k`` again: the stream goes on
        elsewhere after its first ``k`` ops (the last of identical layers is followed by
        the final norm, not by the next layer). Compile those ``k`` ops as a variant of
        their own, so that a replay that stops there ends as it (``finish_as_variant``)
        instead of running the ops deferred so far eagerly. Its outputs: the values the
        region's later ops read and the region's outputs among them (a value the program
        holds besides is added by a recapture at its first replay). Returns whether the
        variant is compiling or ready (not refused: too short to pay, say)."""
        sigs = region.sigs[:k]
        key = region_key(sigs)
        plan = region.plan
        if key in self.regions:
            return self.regions[key].state in (State.COMPILING, State.READY, State.REPLAYING)
        variants = self.by_start.setdefault(_start_key(sigs[0]), [])
        if k < 2 or plan is None or len(variants) >= _setting("ae_max_variants") * 4:
            return False
        new = self.regions[key] = Region(key, sigs)
        variants.append(new)
        self.counts["regions_detected"] += 1
        new.times_seen = new.hot_count = region.exit_positions[k]
        n_in = 1 + max((r[1] for sig in sigs for r in sig[2] if r[0] == "x"), default=-1)
        live = {(r[1], r[2]) for sig in region.sigs[k:] for r in sig[2] if r[0] == "v" and r[1] < k}
        live |= {v for v in plan.outputs if v[0] < k}
        log.info("region %s: side exits at op %d: its first %d ops become variant %s",
                 region.key, k, k, key)
        self.capture(new, lambda: (list(plan.input_metas[:n_in]), live))
        return new.state in (State.COMPILING, State.READY)

    def compile_region(self, region: Region, plan: Any, gm: Any, core: Any) -> None:
        """Take the region's executable from the cache, or compile it in the background
        with its modeled latency on the simulated compiler queue."""
        n = len(region)
        region.plan = plan
        region.graph = gm
        region.verified = False
        region.guards = None  # prepared again at the next replay (a recaptured plan)
        examples = example_inputs(plan)
        cached = background.lookup(gm, examples, region.key)
        if cached is not None:  # a warm cache: ready now, nothing compiled, no latency
            region.executable = cached
            region.to(State.READY)
            self.counts["cache_hits"] += 1
            log.info("region %s (%d ops) is hot: executable from the cache", region.key, n)
            return
        region.compile_latency_ns = compile_latency_ns(core, n)
        # the predicted host saving per second of compile, times the copies replayed per
        # step: the blocks of identical layers compile first
        priority = _gain(core.profile, n) * max(1, region.copies) \
            / max(1, region.compile_latency_ns)
        region.compile_job = core.timeline.submit_compile(
            region.compile_latency_ns, priority, core.profile.compile_parallelism)
        region.ready_at_ns = core.timeline.compile_done_at(region.compile_job)
        region.future = background.submit(gm, examples, region.key)
        if region.state is not State.COMPILING:  # (a recaptured region already is)
            region.to(State.COMPILING)
        self.counts["compilations"] += 1
        log.info("region %s (%d ops) is hot: compiling; modeled latency %d ns, ready at %d ns",
                 region.key, n, region.compile_latency_ns, region.ready_at_ns)

    def find_period(self) -> None:
        """A long segment without a sync: if its end repeats with some period (``_REPEATS``
        copies back to back), the copies are one region, cut at every copy from now on;
        what came before them is split as at a sync, and the unfinished copy at the end
        stays in the segment. The copies are aligned where the repetition began."""
        seg = self.segment
        keys = seg.keys()
        n = len(keys)
        end = keys[n - 1]
        for p in range(_MIN_PERIOD, n // _REPEATS + 1):
            # (each copy ends with the same op: a cheap test before the slices)
            if all(keys[n - 1 - r * p] == end for r in range(1, _REPEATS)) and all(
                    keys[n - p:] == keys[n - (r + 1) * p:n - r * p] for r in range(1, _REPEATS)):
                start = repeats.run_start(keys, n, p)
                f = start + (n - start) // p * p  # the end of the last whole copy
                last, _ = seg.relative(f - p, f)
                k = self._copies_before(last, start, f, p)
                block_key = _block_key(last)
                if self._changes_by_step(block_key):
                    break  # left to the split at the segment's end
                self._known_block(block_key)
                b = f - k * p
                if b > 0:
                    self.close_split(0, b, cut_end=True)
                self.close_window(b, b + p, periodic=True, seen=k,
                                  block=repeats.Repeat(b, p, k), cut=True)
                seg.drop(f)
                return
        if n >= _setting("ae_max_region_ops"):
            self.end_segment(boundary=False)

    def _copies_before(self, last: tuple, start: int, f: int, p: int) -> int:
        """How many whole copies of period ``p`` back to back end at ``f`` as one region
        with the last (``last``): the copies identical to it, and the copies before those
        that differ from it only in floats the lifter lifts (AdamW's steps, whose bias
        corrections change): shown to the lifter oldest first, they count as sightings of
        the lifted region now, not one step at a time in the steps after."""
        seg = self.segment
        k = 1
        while f - (k + 1) * p >= start and seg.relative(f - (k + 1) * p, f - k * p)[0] == last:
            k += 1
        total = (f - start) // p
        if k == total:
            return k
        ident = skeleton(last)
        run = []  # nearest first
        for j in range(k, total):
            sigs, _ = seg.relative(f - (j + 1) * p, f - j * p)
            if skeleton(sigs) != ident:
                break
            run.append(sigs)
        for sigs in reversed(run):
            self.lifter.lift(sigs)
        self.lifter.lift(last)
        lifted = self.lifter.known(last)
        if lifted is None:
            return k
        for sigs in run:
            if self.lifter.known(sigs) != lifted:
                break
            k += 1
        return k

    def try_cut(self, n: int) -> bool:
        """The segment is exactly a region that ends a piece (``close_split``): count it
        and start a new segment."""
        sigs, _ = self.segment.relative(0, n)
        region = self.regions.get(region_key(sigs))
        if region is None:  # a lifted region: its floats change from step to step
            lifted = self.lifter.known(sigs)
            region = self.regions.get(region_key(lifted)) if lifted is not None else None
        if region is None or not region.cut:
            return False
        block = repeats.Repeat(0, n, 1) if region.copies > 1 else None
        self.close_window(0, n, periodic=region.periodic, block=block)
        self.segment.clear()
        return True

    # --- swap-in ------------------------------------------------------------------------------
    def try_start(self, func: Any, args: tuple, kwargs: dict, static: tuple,
                  tensors: list[torch.Tensor]) -> Any:
        refs, seen = [], {}
        for t in tensors:
            refs.append(("x", seen.setdefault(id(t), len(seen))))
        cands = self.by_start.get((func, static, tuple(refs)))
        if not cands:
            return MISMATCH
        core = get_core(self.index)
        best, best_tier = None, 0
        decoding = bool(self.growing.at)  # regions keyed by a length start where seen
        for r in cands:
            tier = self._tier(r, core)
            if not tier:
                continue
            if r.skip_starts > 0:
                r.skip_starts -= 1
                self.reasons[Reason.BACKED_OFF.value] += 1
                continue
            if decoding and self.growing.elsewhere(r.key):
                continue
            rank = (len(r), len(r.plan.lifted), tier)
            if best is None or rank > (len(best), len(best.plan.lifted), best_tier):
                best, best_tier = r, tier
        if best is None:
            return MISMATCH
        if best_tier == 2:
            best.to(State.REPLAYING)
        self.replay = Replay(self, best, self.index, best_tier)
        out = self.replay.try_defer(func, args, kwargs)
        if out is MISMATCH:  # the start key matched: only an index check can fail here
            self.replay.side_exit(self.replay.exit_reason or Reason.GUARD_MISMATCH)
        return out

    def _tier(self, region: Region, core: Any) -> int:
        """How ``region`` can replay now: 2 through its executable (published here if its
        modeled compile is done), 1 as its recorded eager kernels while it compiles
        (``ae_first_tier``), 0 not at all."""
        if region.state is State.COMPILING and region.ready_at_ns is None \
                and region.compile_job is not None:
            region.ready_at_ns = core.timeline.compile_done_at(region.compile_job)
        if region.state is State.COMPILING and region.ready_at_ns is not None \
                and core.now >= region.ready_at_ns:
            self.publish(region)
        if region.state is State.READY:
            return 2
        if region.state is State.COMPILING and region.plan is not None \
                and settings.get_value("ae_first_tier"):
            return 1
        return 0

    def _variants(self, rp: Replay) -> list[Region]:
        """Ready regions from the replaying region's start that agree with it on every op
        matched so far (so they match the stream as far as it went), longest first."""
        region, k = rp.region, rp.pos
        prefix = region.sigs[:k]
        core = get_core(self.index)
        out = []
        for r in self.by_start.get(_start_key(region.sigs[0]), ()):
            if r is region or len(r) < k or r.sigs[:k] != prefix:
                continue
            if self._tier(r, core):
                out.append(r)
        out.sort(key=lambda r: (len(r), len(r.plan.lifted), r.state is State.READY),
                 reverse=True)
        return out

    def _adopt(self, rp: Replay, region: Region) -> None:
        if rp.region.state is State.REPLAYING:
            rp.region.to(State.READY)
        tier = 2 if region.state is State.READY else 1
        if tier == 2:
            region.to(State.REPLAYING)
        rp.adopt(region, tier)

    def switch_variant(self, rp: Replay, func: Any, args: tuple, kwargs: dict) -> Any:
        """The next op does not match the replaying region: go on as another variant from
        the same start that matched the stream so far and takes this op too (several
        regions share a start, such as a transformer's block and the block that ends the
        forward, and which one the stream is becomes known only ops later), or end as a
        variant that stops here. Deferral has run nothing yet, so the choice costs
        nothing. Returns the op's result, or MISMATCH: then ``rp`` either finished as a
        shorter variant or is left open to side-exit as the region it started as."""
        if rp.exit_reason is not None:  # the op itself is refused (an index out of range)
            return MISMATCH
        first = rp.region
        for alt in self._variants(rp):
            if len(alt) == rp.pos:
                continue
            self._adopt(rp, alt)
            out = rp.try_defer(func, args, kwargs)
            if out is not MISMATCH:
                self.counts["variant_switches"] += 1
                alt.switched_in += 1
                return out
            if rp.exit_reason is not None:
                break
        reason = rp.exit_reason
        if rp.region is not first:
            self._adopt(rp, first)
            rp.exit_reason = reason
        if reason is None:
            self.finish_as_variant(rp)
        return MISMATCH

    def finish_as_variant(self, rp: Replay) -> bool:
        """End the replay where it stands, as the ready region that is exactly the ops
        matched so far (the block without the ops that followed it elsewhere), if any."""
        for alt in self._variants(rp):
            if len(alt) == rp.pos:
                self._adopt(rp, alt)
                self.counts["variant_switches"] += 1
                alt.switched_in += 1
                rp.finish()
                return True
        return False

    def publish(self, region: Region) -> None:
        """The simulated compile is done: take the real result (waiting if it is late)."""
        exe, err, stall = background.wait(region.future)
        region.future = None
        region.wall_stall_s += stall
        self.wall_stall_s += stall
        if err is not None:
            region.to(State.ABORTED, Reason.COMPILE_FAILED, f"{type(err).__name__}: {err}")
            self.reasons[Reason.COMPILE_FAILED.value] += 1
            self.counts["compile_failures"] += 1
            if self.refused.learn(err, (sig[0] for sig in region.sigs)):
                log.info("%s runs eagerly between regions from now on: %s",
                         getattr(err, "op", None), getattr(err, "reason", None))
            return
        region.executable = exe
        region.to(State.READY)

    def replay_ended(self, rp: Replay) -> None:
        if self.replay is rp:
            self.replay = None

    def replay_finished(self, rp: Replay) -> None:
        region = rp.region
        region.replays += 1
        self.counts["replays"] += 1
        if rp.tier == 1:
            region.first_tier_replays += 1
            self.counts["first_tier_replays"] += 1
        if region.copies > 1:
            _count_copies(region, 1, self.epoch, self._sync_free(1))
        self.counts["ops_deferred"] += len(region)
        self.growing.replayed(region.sigs, len(region))
        core = get_core(rp.index)
        if region.first_replay_ns is None:
            region.first_replay_ns = core.now
        if core.timeline.observers:
            core.timeline.emit("adaptive", f"replay {region.key}",
                               rp.started_ns, core.now)
        if region.mismatch is not None:
            region.to(State.BLACKLISTED, Reason.VERIFY_MISMATCH, str(region.mismatch))
            self.reasons[Reason.VERIFY_MISMATCH.value] += 1
        else:
            region.record_replay()
            if region.state is State.REPLAYING:
                region.to(State.READY)

    def replay_exited(self, rp: Replay, reason: Reason) -> None:
        region = rp.region
        self.counts["side_exits"] += 1
        self.growing.replayed(rp.region.sigs, rp.pos)
        self.reasons[reason.value] += 1
        core = get_core(rp.index)
        if core.timeline.observers:
            core.timeline.emit("adaptive", f"side exit {region.key}: {reason.value}",
                               rp.started_ns, core.now,
                               {"at_op": rp.pos, "of": len(region)})
        log.debug("side exit of region %s at op %d/%d: %s", region.key, rp.pos, len(region),
                  reason.message)
        if reason is Reason.LIVE_VALUE_NOT_OUTPUT and rp.missing and region.recaptures < _RECAPTURES:
            self.recapture(region, rp.missing)
            return
        # a mismatch with the op the region met at this position before: the stream
        # predictably goes on elsewhere there. Its first ops become a variant of their
        # own; if they do not pay, such exits are not forgiven by good replays, so the
        # region backs off and the stream is recorded from its start (where the other
        # variant is learned; a float that changed is learned that way, lifted). An op
        # never met there before, a new shift say, is forgiven.
        again = False
        if reason is Reason.GUARD_MISMATCH and rp.exit_op is not None:
            again = region.exit_ops.get(rp.pos) == rp.exit_op
            region.exit_ops[rp.pos] = rp.exit_op
            func, static = rp.exit_op
            recorded = region.sigs[rp.pos] if rp.pos < len(region) else None
            new_float = recorded is not None and recorded[0] is func \
                and floats_only_differ(static, recorded[1])
            if again and region.exit_positions[rp.pos] == 1 and not new_float \
                    and self.exit_variant(region, rp.pos):
                again = False
        region.record_exit(reason, rp.pos,
                           exits_before_backoff=_setting("ae_exits_before_blacklist"),
                           backoff_starts=_setting("ae_backoff_starts"), kept=again)

    def recapture(self, region: Region, missing: set[tuple[int, int]]) -> None:
        """A value the program still held at the region's end is not an output (it was
        not held where the region was captured: between the copies of a repeated block,
        a loop's last local is): capture the region again with it as an output too."""
        plan = region.plan
        region.recaptures += 1
        region.exits[Reason.LIVE_VALUE_NOT_OUTPUT] += 1
        try:
            new = plan_region(region.sigs, plan.n_inputs, plan.input_metas,
                              set(plan.outputs) | missing)
            gm = build_graph(region.sigs, new)
        except (CaptureRefused, Exception) as err:  # noqa: BLE001 - refused, never wrong
            region.to(State.BLACKLISTED, Reason.CAPTURE_FAILED, f"{type(err).__name__}: {err}")
            self.reasons[Reason.CAPTURE_FAILED.value] += 1
            return
        if region.state is State.REPLAYING:
            region.to(State.READY)
        region.executable = None
        region.to(State.COMPILING)
        log.info("region %s: recaptured with %d more outputs", region.key, len(missing))
        self.compile_region(region, new, gm, get_core(self.index))

    def on_sync(self, index: int, kind: str) -> None:
        with self.lock:
            rp = self.replay
            if rp is not None:
                rp.end_here(Reason.SYNC_INSIDE)
            self.end_segment()

    def flush(self) -> None:
        """End any replay in progress (at disable)."""
        self.on_sync(self.index, "disable")


def _described(func: Any, args: tuple, kwargs: dict) -> tuple | None:
    """The op, its arguments' metadata and scalars (``static_of``), or None."""
    try:
        return func, static_of(func, args, kwargs)[0]
    except Unsupported:
        return None


def _written(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    out = []
    for pos, name in op_facts(func).written:
        v = args[pos] if pos < len(args) else kwargs.get(name)
        for t in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(t, NeuronTensor):
                out.append(t)
    return out


def _block_key(sigs: tuple) -> tuple[tuple, str]:
    """(start, identity) of a block: blocks are told apart by their signatures with
    liftable float scalars blanked (``lift.block_identity``), so AdamW's per-layer update,
    whose bias corrections change every step, is one block replayed with lifted scalars."""
    return _start_key(sigs[0]), region_key(block_identity(sigs))


def _start_key(sig: tuple) -> tuple:
    func, static, refs, _outs = sig
    return (func, static[:3], refs)


def _count_copies(region: Region, n: int, epoch: int, sync_free: bool) -> None:
    """Count ``n`` more copies of a repeated block in step ``epoch`` (recorded or
    replayed): ``region.copies`` is the most in one step (a sync-free stream has no
    steps: the most seen at once)."""
    if region.step_epoch == epoch and not sync_free:
        region.in_step += n
    else:
        region.in_step = n
    region.step_epoch = epoch
    region.copies = max(region.copies, region.in_step)


def _gain(p: Any, n: int) -> int:
    """Predicted host saving of one replay of an ``n``-op region on profile ``p``."""
    return n * (p.host_dispatch_ns + p.kernel_launch_ns) - (n * p.guard_check_ns + p.executable_launch_ns)


def _pays(p: Any, rep: repeats.Repeat, lo: int, hi: int) -> bool:
    """Whether splitting window [lo, hi) around ``rep`` compiles less than the window."""
    def latency(n: int) -> int:
        return program_compile_latency_ns(p, n, True) if n > 0 else 0
    split = latency(rep.start - lo) + latency(rep.period) + latency(hi - rep.end)
    return split < latency(hi - lo)


def _common_prefix(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _input_metas(seg: Segment, s: int, e: int, n: int) -> list[tuple]:
    """The metadata of each input slot of window [s, e), from the entries' descriptions."""
    base = seg.entries[s].seq
    metas: list[tuple | None] = [None] * n
    slots: dict[int, int] = {}
    for entry in seg.entries[s:e]:
        tmetas = _tensor_metas(entry.static[0])
        for vid, m in zip(entry.vids, tmetas, strict=True):
            p = seg.src.get(vid)
            if p is not None and p[0] >= base:
                continue
            slot = slots.setdefault(vid, len(slots))
            if metas[slot] is None:
                metas[slot] = m
    return metas  # type: ignore[return-value]


def _tensor_metas(desc: Any) -> list[tuple]:
    out: list[tuple] = []

    def go(d: Any) -> None:
        kind = d[0]
        if kind == "T":
            out.append(d[1])
        elif kind in ("L", "U"):
            for v in d[1]:
                go(v)
        elif kind == "K":
            for _, v in d[1]:
                go(v)

    go(desc)
    return out


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
