"""Where work issued under a side stream runs on a NeuronCore's one set of engines.

Why this is not a second queue: a NeuronCore has one set of compute engines (tensor,
vector, scalar, GpSimd), so two streams' kernels never make it compute faster. A second
in-order queue running beside the first would model free throughput that the core does
not have. Why it is not the first queue either: a stream is an ordering promise, not a
place. Work a side stream issues depends only on that stream's earlier work and on what
it waited for (``wait_stream``, ``wait_event``, a collective's ``Work.wait``). Run in
issue order on one queue, FSDP2's copy-in of the next layer's shards (issued under its
all-gather copy-in stream after the current layer's forward) would end after that
forward, and the all-gather that reads it could never overlap it: the forward
all-gathers were exposed on the simulated timeline while on real hardware (a runtime that
takes the next kernel from any stream whose dependencies are met, at kernel boundaries,
FSDP2's streams at high priority) they hide behind the previous layer's compute.

The rules (``SideStreams.place``):

- A side-stream kernel that only moves data (a copy: its cost is DMA time and no compute
  engine's, as FSDP2's copy-in is) runs on the core's DMA queues as soon as its stream is
  ready, beside the compute engines' work. Assumed: the HBM bandwidth it shares with the
  compute kernels' own loads and stores is not modelled.
- Any other side-stream kernel is ready at ``max(host issued it, its stream's frontier)``. If the
  engines are busy then, it runs at the end of the kernel in progress and the work queued
  behind it on the compute queue finishes its duration later: engine time is conserved,
  only the order changes.
- If the engines are idle then (the stream waits for something in the future, e.g. the
  post-reduce division waiting for its reduce-scatter), it runs at that moment and is
  *reserved*: default-stream work issued later that would overlap it is delayed by its
  duration (``SideStreams.admit``), so the engines never run two kernels at once in
  aggregate.
- Default-stream work keeps its place: with side streams in use the compute queue's
  figures change only by the side kernels' durations, which issue order charged too.

Priority (``Stream(priority=)``) is not told apart: every side stream is scheduled as
FSDP2's high-priority ones are.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["SideStreams"]

_ENGINES = ("tensor", "vector", "scalar", "gpsimd")


def _data_movement(detail: Any) -> bool:
    """A kernel that only moves data (a copy, ``cat``, FSDP2's copy-in / copy-out): its
    cost has DMA time and no compute engine's."""
    engine_ns = getattr(detail, "engine_ns", None)
    return bool(engine_ns) and not any(engine_ns.get(e, 0) for e in _ENGINES)


class SideStreams:
    """The side streams of one core's timeline: each one's frontier, the recent kernels
    (to find the one in progress), and the reserved future side kernels."""

    def __init__(self, busy_until: int = 0) -> None:
        # stream id -> when its last kernel, or what it last waited for, ends
        self.free: dict[int, int] = {}
        # (start, end) of the last kernels placed (the kernel in progress at a moment)
        self.recent: deque[tuple[int, int]] = deque(maxlen=16)
        # (start, end) of side kernels placed while the engines were idle, in order
        self.reserved: list[tuple[int, int]] = []
        # when the engines finish the kernels placed so far (a wait may hold the compute
        # queue later than this: ``Timeline.device_free_ns``)
        self.busy_until = int(busy_until)

    def ready(self, stream_id: int) -> int:
        """When side stream ``stream_id``'s work so far is done (0: it has none)."""
        return self.free.get(stream_id, 0)

    def wait(self, stream_id: int, t: int) -> None:
        """Side stream ``stream_id``'s later work waits until ``t``."""
        if t > self.free.get(stream_id, 0):
            self.free[stream_id] = int(t)

    def latest(self) -> int:
        """When every side stream's work ends."""
        return max(self.free.values(), default=0)

    def note(self, start: int, end: int) -> None:
        """A kernel was placed at [start, end) (any stream)."""
        self.recent.append((start, end))
        if end > self.busy_until:
            self.busy_until = end

    def place(self, tl: Any, stream_id: int, device_ns: int, detail: Any = None) -> tuple[int, int]:
        """Place a kernel of ``device_ns`` issued now under side stream ``stream_id`` on
        timeline ``tl`` (``detail``: its ``KernelCost``, if it has one); return its
        (start, end)."""
        ready = max(tl.host_ns, self.free.get(stream_id, 0))
        if _data_movement(detail):  # on the DMA queues: the engines are not involved
            start = ready
        elif ready < self.busy_until:  # engines busy: next kernel boundary, the rest later
            for s, e in reversed(self.recent):
                if s <= ready < e:
                    ready = e
                    break
            start = ready
            # the kernels queued from ``start`` run ``device_ns`` later; a wait of the
            # compute queue past them (``device_wait``) still holds
            self.busy_until += device_ns
            if self.busy_until > tl.device_free_ns:
                tl.device_free_ns = self.busy_until
        else:  # engines idle: reserved against later default-stream work
            start = max(ready, self.reserved[-1][1]) if self.reserved else ready
            self.reserved.append((start, start + device_ns))
        end = start + device_ns
        self.free[stream_id] = end
        if not _data_movement(detail):
            self.note(start, end)
        return start, end

    def admit(self, start: int, device_ns: int) -> tuple[int, int]:
        """Default-stream work of ``device_ns`` that could start at ``start``, after the
        reserved side kernels it meets: (its start, the reserved time inside it, by which
        it ends later since the engines share)."""
        pushed = 0
        keep: list[tuple[int, int]] = []
        for s, e in self.reserved:
            if e <= start:  # ran while the engines were idle
                continue
            if s <= start:  # already running when this work could start
                start = e
            elif s < start + device_ns + pushed:  # starts inside it: the engines share
                pushed += e - s
            else:
                keep.append((s, e))
        self.reserved = keep
        return start, pushed
