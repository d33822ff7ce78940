"""Simulated collective communication: the topology, Neuron's algorithm choice, the cost.

Why here: a collective's duration is a fact about the hardware (links, bandwidths, per-hop
latency), as a kernel's is; the distributed package above only says which collective ran on
how many bytes between which ranks, and this module says how long it takes and keeps each
core's *collective queue* (the chip's collective-communication engines run beside the
compute engines, so an asynchronous all-reduce overlaps the backward pass).

The model is alpha-beta: ``time = factor(op, p) * S / B + steps(op, algorithm, p) * alpha``,
with ``S`` the message size as nccom-test counts it (all_gather: the gathered output;
reduce_scatter: the input; all_reduce: the buffer), ``B`` the bandwidth per rank of the
slowest level the group spans and ``alpha`` that level's per-hop latency. ``factor`` is
nccom-test's bus-bandwidth factor, so the bus bandwidth of a large message approaches ``B``.
Neuron's algorithm choice by size (Neuron collectives documentation, "Collective
communication algorithms"): Mesh below 1 MB, recursive doubling/halving (RDH) from 1 MB to
56 MB, Ring above; the algorithms differ in their number of latency steps.

Sources (AWS Neuron SDK documentation, awsdocs-neuron.readthedocs-hosted.com):

- [T2]  "Trainium2 Architecture": NeuronLink-v3 1.28 TB/s per chip over 4 links, 16 chips in
  a 4x4 2D torus per trn2.48xlarge, 256 GB/s per chip across a Trn2 UltraServer, EFAv3
  3.2 Tbps per instance.
- [T3]  "Trainium3 Architecture": NeuronSwitch, 2.56 TB/s per chip.
- [US]  EC2 Trn2 UltraServers: four trn2.48xlarge instances (64 Trainium2 chips) joined
  by NeuronLink, 256 GB/s per chip between the instances ([T2]'s figure).
- [CC]  "Neuron collective communication": per-hop latency about 1-2 us within an instance,
  about 15 us per EFA hop; algorithm thresholds 1 MB and 56 MB.

Figures with no public source are listed in ``ASSUMED_TOPOLOGY_FIELDS`` and printed as
assumed (``Topology.describe``).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ASSUMED_TOPOLOGY_FIELDS",
    "BUS_FACTORS",
    "CollectiveCost",
    "CollectiveQueue",
    "TOPOLOGIES",
    "Topology",
    "choose_algorithm",
    "collective_cost",
    "collective_queue",
    "get_topology",
    "peek_collective_queue",
]

_MB = 1_000_000


@dataclass(frozen=True)
class Topology:
    """Where ranks sit and what connects them. Bandwidths in bytes/s, latencies in ns."""

    name: str
    cores_per_chip: int  # one rank per physical NeuronCore (LNC=1), as the device profile
    chips_per_instance: int  # 16 per trn2.48xlarge [T2]; trn3: **assumed** 16
    chip_bw: int  # **assumed**: between NeuronCores of one chip: a core's DMA bandwidth
    chip_alpha_ns: int  # **assumed**: per hop between cores of one chip: 1 us ([CC]'s low end)
    link_bw_per_chip: int  # NeuronLink-v3 1.28 TB/s per chip [T2]; NeuronSwitch 2.56 TB/s [T3]
    instance_alpha_ns: int  # per hop between chips of an instance: 2 us ([CC]'s high end)
    efa_bw_per_instance: int  # EFAv3 3.2 Tbps = 400 GB/s per instance [T2]
    efa_alpha_ns: int  # per EFA hop: about 15 us [CC]
    instances_per_ultraserver: int  # 4 per Trn2 UltraServer [US]; trn3: **assumed** 4
    ultraserver_bw_per_chip: int  # 256 GB/s per chip across it [T2]; trn3: **assumed**
    ultraserver_alpha_ns: int  # **assumed**: per hop between instances of it, as within one
    mesh_max_bytes: int = 1 * _MB  # Mesh below 1 MB [CC]
    rdh_max_bytes: int = 56 * _MB  # recursive doubling/halving up to 56 MB, Ring above [CC]

    def describe(self) -> str:
        """The topology's figures, one a line, the assumed ones marked ``(assumed)``."""
        lines = [f"{self.name} collectives topology"]
        for f in self.__dataclass_fields__:
            if f == "name":
                continue
            mark = " (assumed)" if f in ASSUMED_TOPOLOGY_FIELDS else ""
            lines.append(f"  {f} = {getattr(self, f)}{mark}")
        return "\n".join(lines)


ASSUMED_TOPOLOGY_FIELDS: tuple[str, ...] = ("chip_bw", "chip_alpha_ns", "ultraserver_alpha_ns")

TOPOLOGIES: dict[str, Topology] = {
    "trn2": Topology(
        name="trn2",
        cores_per_chip=8,
        chips_per_instance=16,
        chip_bw=368_000_000_000,  # = trn2 dma_bw_per_core (assumed for core-to-core)
        chip_alpha_ns=1_000,
        link_bw_per_chip=1_280_000_000_000,
        instance_alpha_ns=2_000,
        efa_bw_per_instance=400_000_000_000,
        efa_alpha_ns=15_000,
        instances_per_ultraserver=4,
        ultraserver_bw_per_chip=256_000_000_000,
        ultraserver_alpha_ns=2_000,
    ),
    "trn3": Topology(
        name="trn3",
        cores_per_chip=8,
        chips_per_instance=16,
        chip_bw=528_000_000_000,  # = trn3 dma_bw_per_core (assumed for core-to-core)
        chip_alpha_ns=1_000,
        link_bw_per_chip=2_560_000_000_000,
        instance_alpha_ns=2_000,
        efa_bw_per_instance=400_000_000_000,
        efa_alpha_ns=15_000,
        instances_per_ultraserver=4,  # assumed, as trn2's
        ultraserver_bw_per_chip=2_560_000_000_000,  # assumed: NeuronSwitch's [T3] across it
        ultraserver_alpha_ns=2_000,
    ),
}


def get_topology(profile_name: str) -> Topology:
    """The topology of the named hardware profile; ValueError listing the known ones."""
    try:
        return TOPOLOGIES[profile_name]
    except KeyError:
        valid = ", ".join(sorted(TOPOLOGIES))
        raise ValueError(
            f"no collectives topology for hardware profile {profile_name!r}; known: {valid}"
        ) from None


# nccom-test's bus-bandwidth factors (busbw = algbw * factor), by collective
def _factor_all_reduce(p: int) -> float:
    return 2 * (p - 1) / p


def _factor_gather_like(p: int) -> float:
    return (p - 1) / p


def _factor_one(p: int) -> float:
    return 1.0


BUS_FACTORS = {
    "all_reduce": _factor_all_reduce,
    "all_gather": _factor_gather_like,
    "reduce_scatter": _factor_gather_like,
    "all_to_all": _factor_gather_like,
    "gather": _factor_gather_like,
    "scatter": _factor_gather_like,
    "broadcast": _factor_one,
    "reduce": _factor_one,
    "send_recv": _factor_one,
    "barrier": _factor_one,
}


def choose_algorithm(nbytes: int, topo: Topology) -> str:
    """Neuron's choice by message size: "mesh" < 1 MB <= "rdh" <= 56 MB < "ring" [CC]."""
    if nbytes < topo.mesh_max_bytes:
        return "mesh"
    if nbytes <= topo.rdh_max_bytes:
        return "rdh"
    return "ring"


def _latency_steps(op: str, algorithm: str, p: int) -> int:
    """Hops on the critical path: Ring p-1 per phase, RDH log2(p) per phase, Mesh 1 per phase;
    all_reduce (and barrier) has two phases (reduce-scatter, then all-gather)."""
    if op == "send_recv":
        return 1
    phases = 2 if op in ("all_reduce", "barrier") else 1
    if algorithm == "ring":
        per = p - 1
    elif algorithm == "rdh":
        per = math.ceil(math.log2(p))
    else:
        per = 1
    return phases * per


@dataclass(frozen=True)
class CollectiveCost:
    """One collective's simulated duration and the figures that produced it."""

    op: str
    nbytes: int
    ranks: int
    algorithm: str
    level: str  # "chip", "instance", "ultraserver" or "efa": the slowest level it spans
    bandwidth: float  # B, bytes/s per rank
    alpha_ns: int
    ns: int

    @property
    def algbw(self) -> float:
        """Algorithm bandwidth in bytes/s: size / time (nccom-test)."""
        return self.nbytes / (self.ns / 1e9) if self.ns else 0.0

    @property
    def busbw(self) -> float:
        """Bus bandwidth in bytes/s: algbw times the collective's factor (nccom-test)."""
        return self.algbw * BUS_FACTORS[self.op](self.ranks)


def _span(global_ranks: list[int], topo: Topology) -> tuple[str, float, int]:
    """(level, B per rank, alpha) of the slowest level a group of global ranks spans."""
    per_instance = topo.cores_per_chip * topo.chips_per_instance
    chips: dict[int, int] = {}
    instances: dict[int, int] = {}
    per_ultraserver = per_instance * topo.instances_per_ultraserver
    ultraservers = {r // per_ultraserver for r in global_ranks}
    for r in global_ranks:
        chips[r // topo.cores_per_chip] = chips.get(r // topo.cores_per_chip, 0) + 1
        instances[r // per_instance] = instances.get(r // per_instance, 0) + 1
    if len(ultraservers) > 1:  # EFA shared by the instance's ranks in the group
        bw = min(topo.chip_bw, topo.efa_bw_per_instance / max(instances.values()))
        return "efa", bw, topo.efa_alpha_ns
    if len(instances) > 1:  # the UltraServer's NeuronLink, shared by the chip's ranks
        bw = min(topo.chip_bw, topo.ultraserver_bw_per_chip / max(chips.values()))
        return "ultraserver", bw, topo.ultraserver_alpha_ns
    if len(chips) > 1:  # NeuronLink shared by the chip's ranks in the group
        bw = min(topo.chip_bw, topo.link_bw_per_chip / max(chips.values()))
        return "instance", bw, topo.instance_alpha_ns
    return "chip", float(topo.chip_bw), topo.chip_alpha_ns


def collective_cost(op: str, nbytes: int, global_ranks: list[int], topo: Topology) -> CollectiveCost:
    """The simulated duration of ``op`` moving ``nbytes`` (nccom-test's size) among the
    group of ``global_ranks``. A group of one rank costs nothing."""
    if op not in BUS_FACTORS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(sorted(BUS_FACTORS))}")
    p = len(global_ranks)
    algorithm = "p2p" if op == "send_recv" else choose_algorithm(nbytes, topo)
    level, bw, alpha = _span(global_ranks, topo)
    if p <= 1 and op != "send_recv":
        return CollectiveCost(op, nbytes, p, algorithm, level, bw, alpha, 0)
    factor = BUS_FACTORS[op](max(p, 2))
    ns = factor * nbytes / bw * 1e9 + _latency_steps(op, algorithm, max(p, 2)) * alpha
    return CollectiveCost(op, nbytes, p, algorithm, level, bw, alpha, int(round(ns)))


class CollectiveQueue:
    """One core's in-order collective queue (the collective-communication engines).

    ``free_ns``: when its last collective ends; ``busy_ns``: total time running collectives;
    ``exposed_ns``: how long the compute queue waited for collectives (``join``): their
    time not hidden behind compute or host work, plus any wait for a slower rank.
    """

    def __init__(self) -> None:
        self.free_ns = 0
        self.busy_ns = 0
        self.exposed_ns = 0
        self.count = 0
        # side stream id -> the end of the latest collective it waits for (see ``wait_on``)
        self.stream_ready: dict[int, int] = {}

    def run(self, start_ns: int, cost: CollectiveCost, in_order: bool = True) -> int:
        """Run a collective that all ranks reached by ``start_ns``; return its end.

        ``in_order=False`` (point-to-point): the transfer starts at ``start_ns`` whatever
        ran before it on this queue. Two ranks wait for their sends and receives in their
        own orders; were each transfer queued behind the previous one, the two ends of a
        ring's opposite transfers would be placed differently on each rank."""
        start = max(int(start_ns), self.free_ns) if in_order else int(start_ns)
        end = start + cost.ns
        self.free_ns = max(self.free_ns, end)
        self.busy_ns += cost.ns
        self.count += 1
        return end

    def join(self, timeline: Any, end_ns: int) -> None:
        """The compute queue of ``timeline`` waits for a collective ending at ``end_ns``.
        Exposed is what the wait delays the compute queue's next work by (or the host,
        if it looks at the device first): the end past both the compute queue and the
        moment the host issues that work (``Timeline.device_wait``). The host's
        dispatch of the ops after the wait hides a collective as compute does."""
        timeline.device_wait(end_ns, self._exposed)

    def _exposed(self, ns: int) -> None:
        self.exposed_ns += ns

    def wait_on(self, timeline: Any, stream_id: int, end_ns: int) -> None:
        """Stream ``stream_id`` of the core waits for a collective ending at ``end_ns``.

        Why streams matter here: FSDP2 (as on CUDA) runs its all-gathers and
        reduce-scatters under side streams and makes the default stream wait for them only
        where it uses their results (``wait_event`` / ``wait_stream``). The default stream
        (id 0) is the compute queue: it joins now. A side stream has no compute queue of
        its own (compute issued under it runs on the one compute queue, in issue order);
        it remembers the end, its later work starts after it (``hardware.side_streams``),
        and whoever waits for the stream (or an event recorded on it) waits for the
        collective then. That is what lets the next layer's compute run
        while this layer's collective is on the collective queue."""
        if stream_id == 0:
            self.join(timeline, end_ns)
            return
        if end_ns > self.stream_ready.get(stream_id, 0):
            self.stream_ready[stream_id] = int(end_ns)
        timeline.side_streams().wait(stream_id, end_ns)  # its later work waits too

    def pending_ns(self, stream_id: int) -> int:
        """When the collectives side stream ``stream_id`` waits for end (0: none; the
        default stream never has any, it joins them at once)."""
        return self.stream_ready.get(stream_id, 0) if stream_id else 0


_queues: weakref.WeakKeyDictionary[Any, CollectiveQueue] = weakref.WeakKeyDictionary()


def collective_queue(core: Any) -> CollectiveQueue:
    """The collective queue of ``core`` (a ``NeuronCore``), created on first use; a core
    made fresh by ``hardware.reset()`` gets a fresh queue."""
    q = _queues.get(core)
    if q is None:
        q = _queues[core] = CollectiveQueue()
    return q


def peek_collective_queue(core: Any) -> CollectiveQueue | None:
    """The collective queue of ``core`` if it has one (no collective ever ran: None)."""
    return _queues.get(core)
