"""A region and its state machine: recording -> hot -> compiling -> ready -> replaying.

One file holds every state and every allowed transition (LuaJIT drives its trace
compiler the same way from ``lj_trace.c``). Refusals end in ``ABORTED`` with a reason;
side exits that outnumber good replays back a region off for a growing number of starts,
then blacklist it.
Every transition happens on the main thread, at a point fixed by the op stream, so the
simulated clock never depends on thread timing.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter
from typing import Any

from torchneuron.adaptive_eager.reasons import Reason
from torchneuron.adaptive_eager.signature import OpSig, format_region

__all__ = ["State", "Region", "IllegalTransition"]

log = logging.getLogger("torchneuron.adaptive_eager")


class State(enum.Enum):
    RECORDING = "recording"  # seen, not yet hot
    HOT = "hot"  # seen often enough; being captured
    COMPILING = "compiling"  # compiling in the background; replays in the first tier meanwhile
    READY = "ready"  # executable published; replays at its next start
    REPLAYING = "replaying"  # a replay is in progress
    ABORTED = "aborted"  # refused (capture, compile, no gain); runs eagerly
    BLACKLISTED = "blacklisted"  # exited too often; runs eagerly


_ALLOWED: dict[State, set[State]] = {
    State.RECORDING: {State.HOT},
    State.HOT: {State.COMPILING, State.READY, State.ABORTED},  # READY: served by the cache
    State.COMPILING: {State.READY, State.ABORTED, State.BLACKLISTED},  # BLACKLISTED: first tier
    State.READY: {State.REPLAYING, State.BLACKLISTED, State.COMPILING},  # COMPILING: recaptured
    State.REPLAYING: {State.READY, State.BLACKLISTED},
    State.ABORTED: set(),
    State.BLACKLISTED: set(),
}


class IllegalTransition(RuntimeError):
    """A transition the state machine does not allow: a bug in adaptive eager."""


class Region:
    """A repeating window of the op stream, keyed by its signature."""

    def __init__(self, key: str, sigs: tuple[OpSig, ...], periodic: bool = False) -> None:
        self.key = key
        self.sigs = sigs
        self.periodic = periodic
        self.times_seen = 0
        self.hot_count = 0  # sightings that count towards hotness (one per step)
        self.epoch = -1  # the runtime's epoch at the last sighting
        self.copies = 1  # most back-to-back copies in one step (a repeated block)
        self.in_step = 0  # copies in step ``step_epoch`` (recorded or replayed)
        self.step_epoch = -1
        self.cut = False  # ends a piece of a split segment: segments are cut after it
        self.state = State.RECORDING
        self.reason: Reason | None = None  # why it is not (or no longer) swapped in
        self.detail = ""
        self.plan: Any = None
        self.guards: Any = None  # per-op guards, prepared at its first replay (``guard``)
        self.rerun_facts: list | None = None  # per op, for its deferred runs (``replay``)
        self.executable: Any = None
        self.graph: Any = None  # the captured FX graph (the verify reference)
        self.verified = False  # checked, no more checks due (ae_verify_replays off)
        self.mismatch: Any = None  # a verify mismatch of that check
        self.checked_replays = 0  # replays compared with eager (verify.run_checked)
        self.future: Any = None
        self.hot_at_ns: int | None = None
        self.ready_at_ns: int | None = None  # simulated moment its compile finishes
        self.compile_job: int | None = None  # its job on the simulated compiler queue
        self.compile_latency_ns = 0
        self.wall_stall_s = 0.0
        self.replays = 0
        self.first_tier_replays = 0  # of ``replays``: as recorded eager kernels (compiling)
        self.switched_in = 0  # replays that began as another variant (``switch_variant``)
        self.first_replay_ns: int | None = None
        self.exits: Counter[Reason] = Counter()
        self.exit_positions: Counter[int] = Counter()
        self.exit_ops: dict[int, list[Any]] = {}  # position -> ops met there at exits, lately
        self.exits_since_backoff = 0
        self.recaptures = 0  # captured again with more outputs (``Lifecycle.recapture``)
        self.backoffs = 0  # back-offs not yet forgiven (``record_replay``)
        self.skip_starts = 0
        self.good_streak = 0  # good replays since the last side exit
        self.kept_exits = 0  # exits since the last back-off good replays do not forgive
        self.forgive_after = 0  # good replays in a row that forgive a back-off

    def __len__(self) -> int:
        return len(self.sigs)

    def known_compile_error(self) -> BaseException | None:
        """The error of its real compile when that has already failed while its modeled
        compile is not done yet (the runtime learns it only then): a run that ends first
        must not promise that a longer run, or the compile cache, would replay it."""
        future = self.future
        if self.state is not State.COMPILING or future is None or not future.done() \
                or future.cancelled():
            return None
        return future.exception()

    def to(self, state: State, reason: Reason | None = None, detail: str = "") -> None:
        if state not in _ALLOWED[self.state]:
            raise IllegalTransition(f"region {self.key}: {self.state.value} -> {state.value}")
        log.debug("region %s (%d ops): %s -> %s%s", self.key, len(self), self.state.value,
                  state.value, f" ({reason.value}: {detail or reason.message})" if reason else "")
        self.state = state
        if reason is not None:
            self.reason, self.detail = reason, detail

    def record_exit(self, reason: Reason, position: int, *, exits_before_backoff: int,
                    backoff_starts: int, max_backoffs: int = 3, kept: bool = False) -> None:
        """Count a side exit; back off once exits outnumber good replays by
        ``exits_before_backoff`` (``record_replay`` takes one off per good replay), and
        blacklist after repeated back-offs. A region that exits now and then between good
        replays keeps replaying; one that exits every time is backed off after that many
        starts. ``kept``: an exit good replays do not forgive (a predictable one, see
        ``SwapIn.replay_exited``). Leaves the region READY (or BLACKLISTED)."""
        self.exits[reason] += 1
        self.exit_positions[position] += 1
        self.exits_since_backoff += 1
        if kept:  # (the first at this op, forgiven, counts again)
            self.kept_exits += 2 if self.kept_exits == 0 else 1
            self.exits_since_backoff = max(self.exits_since_backoff, self.kept_exits)
        self.good_streak = 0
        if self.state is State.REPLAYING:
            self.to(State.READY)
        if self.exits_since_backoff < exits_before_backoff:
            return
        self.exits_since_backoff = self.kept_exits = 0
        self.backoffs += 1
        if self.backoffs > max_backoffs:
            self.to(State.BLACKLISTED, Reason.BLACKLISTED)
            return
        self.skip_starts = backoff_starts * (2 ** (self.backoffs - 1))
        self.forgive_after = self.skip_starts
        self.reason, self.detail = Reason.BACKED_OFF, f"skipping {self.skip_starts} starts"

    def record_replay(self) -> None:
        """A good replay: it takes one side exit off the count (exits decay, so only
        exits that outnumber replays back the region off), and a run of good replays as
        long as the last back-off forgives that back-off (so exits in bursts far apart
        never add up to a blacklist)."""
        if self.exits_since_backoff > self.kept_exits:
            self.exits_since_backoff -= 1
        if self.backoffs:
            self.good_streak += 1
            if self.good_streak >= self.forgive_after:
                self.backoffs -= 1
                self.good_streak = 0
                if self.reason is Reason.BACKED_OFF:
                    self.reason, self.detail = None, ""

    def explain(self) -> str:
        exe = self.executable
        exits = ", ".join(f"{r.value} x{n}" for r, n in sorted(self.exits.items(), key=lambda x: x[0].value))
        lines = [
            f"region {self.key}: {len(self)} ops, seen {self.times_seen}x, state {self.state.value}"
            + (" (periodic)" if self.periodic else "")
            + (f"; a block repeated {self.copies}x back to back" if self.copies > 1 else ""),
            f"  executable: {exe.name + f' ({exe.num_kernels} kernels, {exe.device_ns} ns)' if exe else 'none'}"
            f"; replays {self.replays}"
            + (f" ({self.switched_in} went on from another variant)" if self.switched_in else "")
            + f"; modeled compile {self.compile_latency_ns} ns"
            + (f"; lifted scalars {len(self.plan.lifted)}" if getattr(self.plan, "lifted", None)
               else "")
            + (f", ready at {self.ready_at_ns} ns" if self.ready_at_ns is not None else ""),
            f"  side exits: {exits or 'none'}",
        ]
        if self.state is State.COMPILING:
            lines.append(f"  why not swapped in: {Reason.COMPILE_PENDING.value}: "
                         f"{Reason.COMPILE_PENDING.message} (ready at {self.ready_at_ns} ns)")
        elif self.reason is not None and (self.state is not State.READY
                                          or self.reason is Reason.BACKED_OFF):
            lines.append(f"  why not swapped in: {self.reason.value}: {self.detail or self.reason.message}")
        return "\n".join(lines)

    def format(self) -> str:
        """The recorded region, one op per line."""
        return format_region(self.sigs)
