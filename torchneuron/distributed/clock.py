"""Agreeing simulated clocks: where a collective starts and ends on every rank's timeline.

Why an exchange: each rank is its own process with its own simulated NeuronCore clock. A
collective cannot start before the last rank reaches it, so every rank sends the moment it
arrives (its host has issued the call, its compute queue has produced the inputs, its
collective queue is free) and all take the latest; it then ends at that moment plus the
hardware layer's cost, the same figure on every rank. The exchange rides the group's gloo
transport (one small all-reduce with MAX) and also carries a signature of the call
(collective, byte count, dtype), so ranks that disagree on shapes or dtypes get a clear error
instead of a gloo failure or a silent mismatch.

Point-to-point agrees the same way, pairwise: the sender's arrival travels ahead of the data
and the receiver's comes back (``p2p``); both ends start the transfer at the later of the
two and end at that moment plus the cost.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import torch

from torchneuron.device.streams import current_stream
from torchneuron.hardware import get_core
from torchneuron.hardware.collectives import (
    CollectiveCost,
    Topology,
    collective_cost,
    collective_queue,
)

__all__ = ["Charge", "arrival_ns", "signature", "charge", "stats"]


@dataclass
class Charge:
    """A collective placed on one rank's timeline: its cost and the end every rank agrees on."""

    index: int  # the neuron device index whose clocks were charged
    cost: CollectiveCost
    start_ns: int
    end_ns: int

    def join(self) -> None:
        """The current stream waits for the collective (``Work.wait``); the host does not.
        On the default stream that is the compute queue; under a side stream (FSDP2's
        all-gather and reduce-scatter streams) the wait is kept for whoever waits for that
        stream (``hardware.collectives.CollectiveQueue.wait_on``)."""
        core = get_core(self.index)
        stream_id = current_stream(self.index).stream_id
        collective_queue(core).wait_on(core.timeline, stream_id, self.end_ns)


def arrival_ns(index: int) -> int:
    """When this rank's core can start a collective: its host has issued it (a dispatch is
    charged under "collective"), the current stream's work has produced the inputs (the
    default stream: the whole compute queue; a side stream: its own work and what it
    waited for, ``hardware.side_streams``), its collective queue has finished the
    previous collective."""
    core = get_core(index)
    tl = core.timeline
    tl.host(core.profile.host_dispatch_ns, "collective")
    return max(tl.host_ns, tl.stream_ready_ns(current_stream(index).stream_id),
               collective_queue(core).free_ns)


def signature(op: str, nbytes: int, dtype: torch.dtype | None) -> int:
    """A number that ranks of one collective must agree on (its name, size and dtype)."""
    return zlib.crc32(f"{op}/{nbytes}/{dtype}".encode()) & 0x7FFF_FFFF


def charge(index: int, op: str, nbytes: int, global_ranks: list[int], start_ns: int,
           topo: Topology, label: str | None = None, in_order: bool = True) -> Charge:
    """Run ``op`` on device ``index``'s collective queue from ``start_ns`` (the latest
    arrival of all ranks; ``in_order=False``, point-to-point: exactly then, see
    ``CollectiveQueue.run``); the interval is shown on the "collective" track."""
    core = get_core(index)
    cost = collective_cost(op, nbytes, global_ranks, topo)
    queue = collective_queue(core)
    start = max(start_ns, queue.free_ns) if in_order else int(start_ns)
    end = queue.run(start, cost, in_order)
    core.timeline.emit("collective", label or op, start, end, cost)
    return Charge(index, cost, start, end)


def stats(index: int = 0) -> dict[str, Any]:
    """This rank's collective figures on device ``index``: how many, simulated ns on the
    collective queue, how much of it the compute queue waited for, the overlapped share."""
    q = collective_queue(get_core(index))
    overlap = 1 - q.exposed_ns / q.busy_ns if q.busy_ns else 0.0
    return {"collectives": q.count, "collective_ns": q.busy_ns, "exposed_ns": q.exposed_ns,
            "overlap": overlap, "end_ns": q.free_ns}
