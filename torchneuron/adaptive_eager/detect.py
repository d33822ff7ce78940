"""Detection: segments of the op stream, and the regions they are instances of.

The op path (``mode``) records each op into the *segment*; a sync, a read or an op
that cannot be deferred ends it (``end_segment``), and the segment is then counted as
an instance of the region with its signature. Segments that differ only in float
scalars (AdamW's bias corrections, a scheduled learning rate) count as one region with
those scalars lifted to inputs (``lift``); a segment that differs from the previous one
from the same start only after a common prefix counts that prefix as a region too; a
sync-free stream is searched for its period (``find_period``). Back-to-back copies of a
block (identical layers, see ``repeats``) are split out of a segment as one region, the
pieces around them as regions of their own, each ending in a *cut* where later segments
are closed (``try_cut``), so that replays chain piece after piece. A region seen
``ae_hot_threshold`` times (in different steps) is handed to the lifecycle
(``Lifecycle.capture``), which compiles it; detection never compiles nor changes a
region's state itself.
"""

from __future__ import annotations

from itertools import compress, count, repeat
from operator import eq
from typing import Any

from torchneuron.adaptive_eager import repeats
from torchneuron.adaptive_eager.ledger import Ledger, start_key
from torchneuron.adaptive_eager.lifecycle import Lifecycle, gain
from torchneuron.adaptive_eager.lift import (
    Lifter,
    block_identity,
    may_lift,
    skeleton,
)
from torchneuron.adaptive_eager.reasons import Reason
from torchneuron.adaptive_eager.recorder import Segment
from torchneuron.adaptive_eager.region import Region, State
from torchneuron.adaptive_eager.signature import region_key
from torchneuron.hardware import get_core, program_compile_latency_ns, settings

__all__ = ["Detector", "PERIOD_CHECKS", "count_copies"]

# A segment this long without a sync is searched for its period (then four times per
# doubling: 320, 384, 448, 512, 640, ...): short sync-bounded steps are never cut by a
# chance repetition of a few ops, and a loop that never syncs is found about one step
# after its third copy.
PERIOD_CHECKS = frozenset(2 ** n + j * 2 ** (n - 2) for n in range(8, 20) for j in range(4))
_MIN_PERIOD = 4  # ops
_REPEATS = 3  # a period must repeat this many times back to back
_MIN_BLOCK = 8  # ops: the shortest block split out of a segment as a repeated region
_LOOP_COPIES = 8  # back-to-back copies that make a block a loop's body, not layers


def _setting(name: str) -> int:
    return int(settings.get_value(name))


class Detector:
    """Closes segments into region sightings; makes regions hot."""

    def __init__(self, ledger: Ledger, lifecycle: Lifecycle) -> None:
        self.ledger = ledger
        self.lifecycle = lifecycle
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

    def end_segment(self, boundary: bool = True) -> None:
        seg = self.ledger.segment
        if seg.entries:
            self.at_boundary = boundary
            try:
                self.close_split(0, len(seg))
            finally:
                self.at_boundary = False
        if boundary:
            if self.lifecycle.unstarted:  # real compiles due to start (once per step)
                self.lifecycle.poll(get_core(self.ledger.index))
            pos = self.ledger.pos()
            self.ledger.growing.step_ended()
            self.longest_epoch = max(self.longest_epoch, pos - self.epoch_pos)
            self.epoch += 1
            self.epoch_pos = pos
        seg.clear()

    def sync_free(self, copies: int, copies_count: bool = True, carried: bool = False) -> bool:
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
        run = self.ledger.pos() - self.epoch_pos
        return run > 4 * self.longest_epoch and run >= _setting("ae_max_region_ops")

    def close_split(self, s: int, e: int, cut_end: bool = False) -> None:
        """Close window [s, e) of the segment: each run of back-to-back copies of a block
        (the layers of a model, see ``repeats``) as one region, the pieces between as
        regions of their own. Every piece that ends before ``e`` (or at it, with
        ``cut_end``) becomes a cut point: from then on a segment that is exactly that
        piece ends there, so the next piece can start replaying at the next op."""
        pieces = repeats.split(self.ledger.segment.keys(), s, e, _MIN_BLOCK, self._accept_block)
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
        p = get_core(self.ledger.index).profile
        if gain(p, rep.period) <= _setting("ae_min_gain_ns") or not _pays(p, rep, lo, hi):
            return None
        seg = self.ledger.segment
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
        sigs, slot_vids = self.ledger.segment.relative(s, e)
        windows = [(s, e)] if block is None else [
            (block.start + j * block.period, block.start + (j + 1) * block.period)
            for j in range(block.copies)]
        # Values alive at the window's end are the graph's outputs: known exactly only when
        # the window ends the segment now (a value freed since then, unread by any op,
        # is still held at a replay's end: autograd's seed gradient, for one)
        exact = windows[-1][1] == len(self.ledger.segment)
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
                self.cuts.setdefault(e - s, set()).add(self.ledger.segment.entries[e - 1].period_key())
        if block is not None:  # identical copies: no changing prefix to find
            return region
        start = start_key(sigs[0])
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
        seg = self.ledger.segment
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
        region = self.ledger.regions.get(key)
        if region is None:
            start = start_key(sigs[0])
            variants = self.ledger.by_start.setdefault(start, [])
            if len(variants) >= _setting("ae_max_variants") * 4:
                self.ledger.reasons[Reason.TOO_MANY_VARIANTS.value] += 1
                return None
            region = self.ledger.regions[key] = Region(key, sigs, periodic)
            variants.append(region)
            self.ledger.counts["regions_detected"] += 1
        elif prefix and region.state is State.RECORDING:
            # Seen again as a prefix only: the full segments from this start keep
            # changing after it (a changing scalar, say). A prefix first found is counted
            # once, so that a full segment that does repeat is compiled before it.
            pass
        if self.ledger.growing.at:
            self.ledger.growing.started(region.key, len(self.ledger.segment), windows or [(s, e)])
        region.times_seen += seen + earlier
        region.hot_count += earlier
        # Hotness counts one sighting per step (the ops between two boundaries): copies
        # of a block inside one step (the layers) are identical even where the steps
        # differ (AdamW's bias corrections). In a stream without boundaries each sighting
        # counts: its periods are its steps.
        same_step = region.epoch == self.epoch
        sync_free = self.sync_free(region.in_step + seen if block and same_step else seen,
                                    copies_count=not alike, carried=carried)
        if sync_free:
            region.hot_count += seen
        elif not same_step:
            region.hot_count += 1
        if block:
            count_copies(region, seen, self.epoch, sync_free)
        region.epoch = self.epoch
        if (exact and region.state is State.RECORDING
                and region.hot_count >= _setting("ae_hot_threshold")):
            self.make_hot(region, s, e, windows or [(s, e)])
        return region

    def make_hot(self, region: Region, s: int, e: int, windows: list[tuple[int, int]]) -> None:
        """Capture the region from window [s, e) and compile it. Its graph returns the
        values that may be used after any of ``windows`` (its instances in the segment:
        the copies of a repeated block need the same outputs)."""
        seg = self.ledger.segment

        def inputs_and_live() -> tuple[list[tuple], set[tuple[int, int]]]:
            _, slot_vids = seg.relative(s, e)
            return (_input_metas(seg, s, e, len(slot_vids)),
                    set().union(*(seg.live_at(a, b) for a, b in windows)))

        self.lifecycle.capture(region, inputs_and_live)

    def find_period(self) -> None:
        """A long segment without a sync: if its end repeats with some period (``_REPEATS``
        copies back to back), the copies are one region, cut at every copy from now on;
        what came before them is split as at a sync, and the unfinished copy at the end
        stays in the segment. The copies are aligned where the repetition began."""
        seg = self.ledger.segment
        keys = seg.keys()
        n = len(keys)
        end = keys[n - 1]
        # the periods tried, ascending: those whose copies all end with the same op (the
        # last), found from where that op is (in C) rather than by a test per period
        at = set(compress(count(), map(eq, keys, repeat(end))))
        top = n // _REPEATS
        periods = sorted(p for p in (n - 1 - j for j in at) if _MIN_PERIOD <= p <= top and all(
            n - 1 - r * p in at for r in range(2, _REPEATS)))
        for p in periods:
            if all(keys[n - p:] == keys[n - (r + 1) * p:n - r * p] for r in range(1, _REPEATS)):
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
        seg = self.ledger.segment
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
        sigs, _ = self.ledger.segment.relative(0, n)
        region = self.ledger.regions.get(region_key(sigs))
        if region is None:  # a lifted region: its floats change from step to step
            lifted = self.lifter.known(sigs)
            region = self.ledger.regions.get(region_key(lifted)) if lifted is not None else None
        if region is None or not region.cut:
            return False
        block = repeats.Repeat(0, n, 1) if region.copies > 1 else None
        self.close_window(0, n, periodic=region.periodic, block=block)
        self.ledger.segment.clear()
        return True


def _block_key(sigs: tuple) -> tuple[tuple, str]:
    """(start, identity) of a block: blocks are told apart by their signatures with
    liftable float scalars blanked (``lift.block_identity``), so AdamW's per-layer update,
    whose bias corrections change every step, is one block replayed with lifted scalars."""
    return start_key(sigs[0]), region_key(block_identity(sigs))


def count_copies(region: Region, n: int, epoch: int, sync_free: bool) -> None:
    """Count ``n`` more copies of a repeated block in step ``epoch`` (recorded or
    replayed): ``region.copies`` is the most in one step (a sync-free stream has no
    steps: the most seen at once)."""
    if region.step_epoch == epoch and not sync_free:
        region.in_step += n
    else:
        region.in_step = n
    region.step_epoch = epoch
    region.copies = max(region.copies, region.in_step)


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
        tmetas = _tensor_metas(entry.static.args)
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
