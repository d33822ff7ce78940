"""Swap-in: which ready region replays at a start point, which variant a replay goes on
as, and what a replay's end means for its region.

At a start point (the segment is empty) the longest region whose first op matches and
that can replay now (``Lifecycle.tier``: its executable, or its recorded eager kernels
while it compiles) starts a ``Replay``. Several regions may share that first op (a
block's forward followed by the next block, and the last block's; AdamW's update of a
block and of the other parameters), and which one the stream is shows only ops later: a
replay whose next op mismatches goes on as another replayable variant from its start
that agrees with it on every op so far, or ends as the one that stops there
(``switch_variant``), before it side-exits. ``SwapIn`` is the replay's owner
(``replay.ReplayOwner``): it hears how each replay ended and counts it, and asks the
lifecycle for the state changes.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from torchneuron.adaptive_eager.detect import Detector, count_copies
from torchneuron.adaptive_eager.ledger import Ledger, start_key
from torchneuron.adaptive_eager.lifecycle import Lifecycle
from torchneuron.adaptive_eager.lift import floats_only_differ
from torchneuron.adaptive_eager.reasons import Reason
from torchneuron.adaptive_eager.region import Region, State
from torchneuron.adaptive_eager.replay import MISMATCH, Replay
from torchneuron.adaptive_eager.signature import Call, InputRef
from torchneuron.hardware import get_core, settings

__all__ = ["SwapIn"]

log = logging.getLogger("torchneuron.adaptive_eager")
_RECAPTURES = 2  # recaptures of a region for values held at its end that it lacks
_EXIT_OPS_KEPT = 4  # ops remembered per position of a region's side exits (``replay_exited``)


def _setting(name: str) -> int:
    return int(settings.get_value(name))


class SwapIn:
    """Starts replays, switches their variants, and hears how each ended."""

    def __init__(self, ledger: Ledger, lifecycle: Lifecycle, detector: Detector) -> None:
        self.ledger = ledger
        self.lifecycle = lifecycle
        self.detector = detector

    # --- the start ----------------------------------------------------------------------------
    def try_start(self, func: Any, args: tuple, kwargs: dict, static: Call,
                  tensors: list[torch.Tensor]) -> Any:
        """At a start point: replay the best region whose first op is this one, deferring
        the op; MISMATCH if none can."""
        L = self.ledger
        refs, seen = [], {}
        for t in tensors:
            refs.append(InputRef("x", seen.setdefault(id(t), len(seen))))
        cands = L.by_start.get((func, static, tuple(refs)))
        if not cands:
            return MISMATCH
        core = get_core(L.index)
        tier_of = self.lifecycle.tier
        best, best_tier = None, 0
        decoding = bool(L.growing.at)  # regions keyed by a length start where seen
        for r in cands:
            tier = tier_of(r, core)
            if not tier:
                continue
            if r.skip_starts > 0:
                r.skip_starts -= 1
                L.reasons[Reason.BACKED_OFF.value] += 1
                continue
            if decoding and L.growing.elsewhere(r.key):
                continue
            rank = (len(r), len(r.plan.lifted), tier)
            if best is None or rank > (len(best), len(best.plan.lifted), best_tier):
                best, best_tier = r, tier
        if best is None:
            return MISMATCH
        best_tier = self.lifecycle.start_replay(best)
        rp = L.replay = Replay(self, best, L.index, best_tier)
        out = rp.try_defer(func, args, kwargs)
        if out is MISMATCH:  # the start key matched: only an index check can fail here
            rp.side_exit(rp.exit_reason or Reason.GUARD_MISMATCH)
        return out

    # --- variants -----------------------------------------------------------------------------
    def _variants(self, rp: Replay) -> list[Region]:
        """Replayable regions from the replaying region's start that agree with it on
        every op matched so far (so they match the stream as far as it went), longest
        first."""
        region, k = rp.region, rp.pos
        prefix = region.sigs[:k]
        core = get_core(self.ledger.index)
        out = []
        for r in self.ledger.by_start.get(start_key(region.sigs[0]), ()):
            if r is region or len(r) < k or r.sigs[:k] != prefix:
                continue
            if self.lifecycle.tier(r, core):
                out.append(r)
        out.sort(key=lambda r: (len(r), len(r.plan.lifted), r.state is State.READY),
                 reverse=True)
        return out

    def _adopt(self, rp: Replay, region: Region) -> None:
        self.lifecycle.stop_replay(rp.region)
        rp.adopt(region, self.lifecycle.start_replay(region))

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
                self.ledger.counts["variant_switches"] += 1
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

    # --- the replay's owner (``replay.ReplayOwner``) ------------------------------------------
    def finish_as_variant(self, rp: Replay) -> bool:
        """End the replay where it stands, as the ready region that is exactly the ops
        matched so far (the block without the ops that followed it elsewhere), if any."""
        for alt in self._variants(rp):
            if len(alt) == rp.pos:
                self._adopt(rp, alt)
                self.ledger.counts["variant_switches"] += 1
                alt.switched_in += 1
                rp.finish()
                return True
        return False

    def replay_ended(self, rp: Replay) -> None:
        if self.ledger.replay is rp:
            self.ledger.replay = None

    def replay_finished(self, rp: Replay) -> None:
        L = self.ledger
        region = rp.region
        region.replays += 1
        L.counts["replays"] += 1
        if rp.tier == 1:
            region.first_tier_replays += 1
            L.counts["first_tier_replays"] += 1
        if region.copies > 1:
            d = self.detector
            count_copies(region, 1, d.epoch, d.sync_free(1))
        L.counts["ops_deferred"] += len(region)
        L.growing.replayed(region.sigs, len(region))
        core = get_core(rp.index)
        if region.first_replay_ns is None:
            region.first_replay_ns = core.now
        if core.timeline.observers:
            core.timeline.emit("adaptive", f"replay {region.key}",
                               rp.started_ns, core.now)
        self.lifecycle.replayed(region)

    def replay_exited(self, rp: Replay, reason: Reason) -> None:
        L = self.ledger
        region = rp.region
        L.counts["side_exits"] += 1
        L.growing.replayed(rp.region.sigs, rp.pos)
        L.reasons[reason.value] += 1
        core = get_core(rp.index)
        if core.timeline.observers:
            core.timeline.emit("adaptive", f"side exit {region.key}: {reason.value}",
                               rp.started_ns, core.now,
                               {"at_op": rp.pos, "of": len(region)})
        log.debug("side exit of region %s at op %d/%d: %s", region.key, rp.pos, len(region),
                  reason.message)
        if reason is Reason.LIVE_VALUE_NOT_OUTPUT and rp.missing and region.recaptures < _RECAPTURES:
            self.lifecycle.recapture(region, rp.missing)
            return
        # a mismatch with the op the region met at this position before: the stream
        # predictably goes on elsewhere there. Its first ops become a variant of their
        # own; if they do not pay, such exits are not forgiven by good replays, so the
        # region backs off and the stream is recorded from its start (where the other
        # variant is learned; a float that changed is learned that way, lifted). An op
        # never met there before, a new shift say, is forgiven.
        again = False
        if reason is Reason.GUARD_MISMATCH and rp.exit_op is not None:
            # (every op met there lately, not only the last: two streams going on from
            # one position in turn, a GRU's layers say, are each met there again)
            met = region.exit_ops.setdefault(rp.pos, [])
            again = rp.exit_op in met
            if not again:
                met.append(rp.exit_op)
                del met[:-_EXIT_OPS_KEPT]
            func, static = rp.exit_op
            recorded = region.sigs[rp.pos] if rp.pos < len(region) else None
            new_float = recorded is not None and recorded.func is func \
                and floats_only_differ(static, recorded.static)
            if again and region.exit_positions[rp.pos] == 1 and not new_float \
                    and self.lifecycle.exit_variant(region, rp.pos):
                again = False
        region.record_exit(reason, rp.pos,
                           exits_before_backoff=_setting("ae_exits_before_blacklist"),
                           backoff_starts=_setting("ae_backoff_starts"), kept=again)
