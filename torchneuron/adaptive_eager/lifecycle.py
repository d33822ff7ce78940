"""The region lifecycle: the one owner of every state change after recording.

A region that detection (``detect``) found hot is captured here, refused or submitted
to the simulated compiler queue (or served by the compile cache), published when its
modeled compile is done, recaptured when a replay meets a live value it does not
return, and moved between ready and replaying as replays start, switch variant and
end. Every ``Region.to()`` of the runtime is a call in this module, so the state
machine of ``region`` has one driver (LuaJIT's ``lj_trace.c`` drives its traces the
same way); detection and the swap-in decisions only ask it.
"""

from __future__ import annotations

import logging
from typing import Any

from torchneuron.adaptive_eager import background
from torchneuron.adaptive_eager.capture import (
    CaptureRefused,
    build_graph,
    example_inputs,
    plan_region,
)
from torchneuron.adaptive_eager.ledger import Ledger, start_key
from torchneuron.adaptive_eager.reasons import Reason
from torchneuron.adaptive_eager.region import Region, State
from torchneuron.adaptive_eager.signature import InputRef, ValueRef, region_key
from torchneuron.compiler.errors import CompileError
from torchneuron.compiler.launch import compile_latency_ns
from torchneuron.hardware import get_core, settings

__all__ = ["Lifecycle", "gain"]

log = logging.getLogger("torchneuron.adaptive_eager")
# The real compile of a region starts when its modeled compile (on the simulated clock)
# is this close to done, not when the region turns hot: a compile the run never reaches
# (a short run, a region that becomes ready after the loop ended) then costs the steps
# no wall time, and one it does reach competes with the program's own thread (for the
# GIL, and for the cores of a loaded machine) only for the last stretch before it is
# used. A compile not done by then makes the replay wait on the wall clock only
# (``publish``); simulated time never depends on it.
START_AHEAD_NS = 1_000_000_000


def _setting(name: str) -> int:
    return int(settings.get_value(name))


def gain(p: Any, n: int) -> int:
    """Predicted host saving of one replay of an ``n``-op region on profile ``p``."""
    return n * (p.host_dispatch_ns + p.kernel_launch_ns) - (n * p.guard_check_ns + p.executable_launch_ns)


class Lifecycle:
    """Capture, compile, publish and the replay transitions of every region."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        # compiling regions whose real compile has not started: key -> (region, examples)
        self.unstarted: dict[str, tuple[Region, list[Any]]] = {}

    # --- hot: capture and compile -------------------------------------------------------------
    def capture(self, region: Region, inputs_and_live: Any) -> None:
        """Make the region hot and compile it, unless the variants from its start are at
        their cap or a replay would not pay; ``inputs_and_live()``: its input slots'
        metadata and the values live after it (the graph's outputs)."""
        L = self.ledger
        region.to(State.HOT)
        core = get_core(L.index)
        region.hot_at_ns = core.now
        compiled = sum(1 for r in L.by_start[start_key(region.sigs[0])]
                       if r.state in (State.COMPILING, State.READY))
        if compiled >= _setting("ae_max_variants"):
            region.to(State.ABORTED, Reason.TOO_MANY_VARIANTS)
            L.reasons[Reason.TOO_MANY_VARIANTS.value] += 1
            return
        p = core.profile
        n = len(region)
        g = gain(p, n)
        if g <= _setting("ae_min_gain_ns"):
            region.to(State.ABORTED, Reason.NO_GAIN, f"predicted saving {g} ns per replay")
            L.reasons[Reason.NO_GAIN.value] += 1
            return
        try:
            metas, live = inputs_and_live()
            plan = plan_region(region.sigs, len(metas), metas, live)
            gm = build_graph(region.sigs, plan)
        except (CaptureRefused, Exception) as err:  # noqa: BLE001 - refused, never wrong
            region.to(State.ABORTED, Reason.CAPTURE_FAILED, f"{type(err).__name__}: {err}")
            L.reasons[Reason.CAPTURE_FAILED.value] += 1
            L.refused.learn(err, (sig.func for sig in region.sigs))  # an op's own: eager
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
        L = self.ledger
        sigs = region.sigs[:k]
        key = region_key(sigs)
        plan = region.plan
        if key in L.regions:
            return L.regions[key].state in (State.COMPILING, State.READY, State.REPLAYING)
        if k < 1 or plan is None:
            return False
        # (one op too: whether a variant pays is ``capture``'s gain check, as for any)
        variants = L.by_start.setdefault(start_key(sigs[0]), [])
        if len(variants) >= _setting("ae_max_variants") * 4:
            return False
        new = L.regions[key] = Region(key, sigs)
        variants.append(new)
        L.counts["regions_detected"] += 1
        new.times_seen = new.hot_count = region.exit_positions[k]
        n_in = 1 + max((r.index for sig in sigs for r in sig.refs if isinstance(r, InputRef)),
                       default=-1)
        live = {r.value for sig in region.sigs[k:] for r in sig.refs
                if isinstance(r, ValueRef) and r.op < k}
        live |= {v for v in plan.outputs if v[0] < k}
        log.info("region %s: side exits at op %d: its first %d ops become variant %s",
                 region.key, k, k, key)
        self.capture(new, lambda: (list(plan.input_metas[:n_in]), live))
        return new.state in (State.COMPILING, State.READY)

    def compile_region(self, region: Region, plan: Any, gm: Any, core: Any) -> None:
        """Take the region's executable from the cache, or compile it in the background
        with its modeled latency on the simulated compiler queue."""
        L = self.ledger
        n = len(region)
        region.plan = plan
        region.graph = gm
        region.verified = False
        region.guards = None  # prepared again at the next replay (a recaptured plan)
        examples = example_inputs(plan)
        try:
            cached = background.lookup(gm, examples, region.key)
        except CompileError as err:  # its compile failed before: the cache remembers it
            self.failed(region, err)
            return
        if cached is not None:  # a warm cache: ready now, nothing compiled, no latency
            region.executable = cached
            region.to(State.READY)
            L.counts["cache_hits"] += 1
            log.info("region %s (%d ops) is hot: executable from the cache", region.key, n)
            return
        region.compile_latency_ns = compile_latency_ns(core, n)
        # the predicted host saving per second of compile, times the copies replayed per
        # step: the blocks of identical layers compile first
        priority = gain(core.profile, n) * max(1, region.copies) \
            / max(1, region.compile_latency_ns)
        region.compile_job = core.timeline.submit_compile(
            region.compile_latency_ns, priority, core.profile.compile_parallelism)
        region.ready_at_ns = core.timeline.compile_done_at(region.compile_job)
        region.future = None
        self.unstarted[region.key] = (region, examples)
        if region.state is not State.COMPILING:  # (a recaptured region already is)
            region.to(State.COMPILING)
        L.counts["compilations"] += 1
        self.poll(core)
        log.info("region %s (%d ops) is hot: compiling; modeled latency %d ns, ready at %d ns",
                 region.key, n, region.compile_latency_ns, region.ready_at_ns)

    def recapture(self, region: Region, missing: set[tuple[int, int]]) -> None:
        """A value the program still held at the region's end is not an output (it was
        not held where the region was captured: between the copies of a repeated block,
        a loop's last local is): capture the region again with it as an output too."""
        L = self.ledger
        plan = region.plan
        region.recaptures += 1
        region.exits[Reason.LIVE_VALUE_NOT_OUTPUT] += 1
        try:
            new = plan_region(region.sigs, plan.n_inputs, plan.input_metas,
                              set(plan.outputs) | missing)
            gm = build_graph(region.sigs, new)
        except (CaptureRefused, Exception) as err:  # noqa: BLE001 - refused, never wrong
            region.to(State.BLACKLISTED, Reason.CAPTURE_FAILED, f"{type(err).__name__}: {err}")
            L.reasons[Reason.CAPTURE_FAILED.value] += 1
            return
        if region.state is State.REPLAYING:
            region.to(State.READY)
        region.executable = None
        region.to(State.COMPILING)
        log.info("region %s: recaptured with %d more outputs", region.key, len(missing))
        self.compile_region(region, new, gm, get_core(L.index))

    # --- the real compiles ---------------------------------------------------------------------
    def poll(self, core: Any) -> None:
        """Start the real compile of each compiling region whose modeled compile is within
        ``START_AHEAD_NS`` of done (or done); forget regions no longer compiling."""
        if not self.unstarted:
            return
        for key, (region, _) in list(self.unstarted.items()):
            if region.state is not State.COMPILING:
                del self.unstarted[key]
                continue
            if region.ready_at_ns is None and region.compile_job is not None:
                region.ready_at_ns = core.timeline.compile_done_at(region.compile_job)
            if region.ready_at_ns is not None and core.now >= region.ready_at_ns - START_AHEAD_NS:
                self._start(region)

    def _start(self, region: Region) -> None:
        _, examples = self.unstarted.pop(region.key)
        region.future = background.submit(region.graph, examples, region.key)

    def start_unstarted(self, *, wait: bool = False) -> None:
        """Adaptive eager stops (``disable``) or the process ends: compile the regions
        not yet started after all when a compile cache will keep their executables (the
        next run then finds them: ``adaptive_warm``); else leave them, never compiled.
        ``wait``: compile on this thread (at interpreter exit, no new thread may start)."""
        if not self.unstarted or not background.caching():
            return
        for region, examples in list(self.unstarted.values()):
            if region.state is not State.COMPILING:
                self.unstarted.pop(region.key)
                continue
            if wait:
                self.unstarted.pop(region.key)
                region.future = background.compiled_now(region.graph, examples, region.key)
            else:
                self._start(region)

    # --- ready: publish -----------------------------------------------------------------------
    def tier(self, region: Region, core: Any) -> int:
        """How ``region`` can replay now: 2 through its executable (published here if its
        modeled compile is done), 1 as its recorded eager kernels while it compiles
        (``ae_first_tier``), 0 not at all."""
        if region.state is State.COMPILING and region.ready_at_ns is None \
                and region.compile_job is not None:
            region.ready_at_ns = core.timeline.compile_done_at(region.compile_job)
        if region.future is None and region.state is State.COMPILING \
                and region.ready_at_ns is not None and region.key in self.unstarted \
                and core.now >= region.ready_at_ns - START_AHEAD_NS:
            self._start(region)
        if region.state is State.COMPILING and region.ready_at_ns is not None \
                and core.now >= region.ready_at_ns:
            self.publish(region)
        if region.state is State.READY:
            return 2
        if region.state is State.COMPILING and region.plan is not None \
                and settings.get_value("ae_first_tier"):
            return 1
        return 0

    def publish(self, region: Region) -> None:
        """The simulated compile is done: take the real result (waiting if it is late)."""
        L = self.ledger
        if region.future is None:  # not started (``poll``): compiled now, while we wait
            self._start(region)
        exe, err, stall = background.wait(region.future)
        region.future = None
        region.wall_stall_s += stall
        L.wall_stall_s += stall
        if err is not None:
            self.failed(region, err)
            return
        region.executable = exe
        region.to(State.READY)

    def failed(self, region: Region, err: BaseException) -> None:
        """The region's compile failed (now, or in an earlier run the compile cache
        remembers): it runs eagerly, and the op to blame between regions from now on."""
        L = self.ledger
        region.to(State.ABORTED, Reason.COMPILE_FAILED, f"{type(err).__name__}: {err}")
        L.reasons[Reason.COMPILE_FAILED.value] += 1
        L.counts["compile_failures"] += 1
        if L.refused.learn(err, (sig.func for sig in region.sigs)):
            log.info("%s runs eagerly between regions from now on: %s",
                     getattr(err, "op", None), getattr(err, "reason", None))

    # --- replays ------------------------------------------------------------------------------
    def start_replay(self, region: Region) -> int:
        """A replay of ``region`` begins (or goes on as it, a variant): the tier it
        replays in, 2 (its executable: the region is replaying) or 1 (still compiling)."""
        if region.state is State.READY:
            region.to(State.REPLAYING)
            return 2
        return 1

    def stop_replay(self, region: Region) -> None:
        """A replay of ``region`` went on as another variant (or ended): ready again."""
        if region.state is State.REPLAYING:
            region.to(State.READY)

    def replayed(self, region: Region) -> None:
        """A replay of ``region`` finished: blacklisted if its verify check mismatched,
        else counted as a good replay (``Region.record_replay``) and ready again."""
        if region.mismatch is not None:
            region.to(State.BLACKLISTED, Reason.VERIFY_MISMATCH, str(region.mismatch))
            self.ledger.reasons[Reason.VERIFY_MISMATCH.value] += 1
        else:
            region.record_replay()
            self.stop_replay(region)
