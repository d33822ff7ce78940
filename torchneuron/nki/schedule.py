"""A kernel's instructions on the NeuronCore's engines: cost, schedule and report.

One source of engine facts: each instruction is costed by ``hardware.kernel_cost`` on a
one-instruction ``KernelWork`` (the same rules and profile figures neuronc's schedule
uses), never by a second copy of the formulas:

- TensorE: a ``(m, k, n)`` matmul tile at the dtype's rate (fp8 2x on trn2, MX 4x on
  trn3, fp32 4x slower), with its static overhead;
- Vector / Scalar / GpSimd: ``overhead + max(elements per partition, 64)`` cycles;
- DMA: the transfer at the core's DMA bandwidth is serialized (one bandwidth), while the
  ~600 ns per-instruction latency overlaps across the core's 16 queues. The ~1.3 us
  semaphore-to-start is paid once per kernel that moves data.

List scheduling in program order: an instruction starts when the instructions that wrote
what it reads (and read or wrote what it writes) have ended and its engine is free. The
kernel's time is the last end plus the fixed DMA start, never below the roofline
``max(flops / peak, HBM bytes / HBM bandwidth)``. Integer nanoseconds throughout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchneuron.hardware import ENGINES, HardwareProfile, KernelCost, KernelWork, kernel_cost

from ._context import Instruction

__all__ = ["KernelSchedule", "instruction_ns", "schedule"]

_LANES = 128


def instruction_ns(ins: Instruction, p: HardwareProfile) -> int:
    """Busy time of one instruction on its engine (DMA: transfer plus its latency)."""
    w = ins.work
    if ins.engine == "tensor":
        work = KernelWork(matmuls=[(1, w["m"], w["k"], w["n"], w["dtype"])])
    elif ins.engine == "dma":
        work = KernelWork(hbm_read_bytes=w["bytes"])
    else:
        elems = _LANES * max(1, int(w.get("elems", 1)))
        work = KernelWork(instructions=1, **{f"{ins.engine}_elems": elems})
    return kernel_cost(work, p).engine_ns[ins.engine]


@dataclass
class KernelSchedule:
    """The schedule of one kernel run (all times integer ns, relative to the kernel start)."""

    name: str
    profile: str
    total_ns: int
    fixed_ns: int
    roofline_ns: int
    engine_busy_ns: dict[str, int]
    instruction_counts: dict[str, int]
    flops: int
    hbm_bytes: int
    sbuf_peak_bytes: int  # per partition
    psum_peak_bytes: int  # per partition
    timeline: list[tuple[str, str, int, int, str]] = field(default_factory=list, repr=False)
    # TensorE tiles: [count, m, k, n, dtype] per distinct shape (a custom call's plan)
    matmuls: list[list[Any]] = field(default_factory=list, repr=False)

    @property
    def roofline_share(self) -> float:
        """roofline / simulated time: 1.0 means the kernel runs at the hardware's bound."""
        return self.roofline_ns / self.total_ns if self.total_ns else 0.0

    @property
    def bound(self) -> str:
        busiest = max(ENGINES, key=lambda e: self.engine_busy_ns.get(e, 0))
        return busiest if self.engine_busy_ns.get(busiest, 0) else "fixed"

    def kernel_cost(self) -> KernelCost:
        """The schedule as the core's ``KernelCost`` (what an eager launch charges)."""
        return KernelCost(dict(self.engine_busy_ns), self.fixed_ns, self.total_ns,
                          self.roofline_ns, self.bound)

    def report(self) -> str:
        """A printable summary: time, roofline share, per-engine busy time and counts."""
        lines = [
            f"NKI kernel {self.name} on {self.profile}: {self.total_ns} ns simulated, "
            f"roofline {self.roofline_ns} ns ({100 * self.roofline_share:.1f}% of roofline), "
            f"bound by {self.bound}",
            f"  flops {self.flops}, HBM bytes {self.hbm_bytes}, SBUF peak "
            f"{self.sbuf_peak_bytes} B/partition, PSUM peak {self.psum_peak_bytes} B/partition",
        ]
        for e in ENGINES:
            busy = self.engine_busy_ns.get(e, 0)
            share = 100 * busy / self.total_ns if self.total_ns else 0.0
            lines.append(f"  {e:7s} {self.instruction_counts.get(e, 0):6d} instructions "
                         f"{busy:12d} ns busy ({share:5.1f}%)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()


def schedule(name: str, instructions: list[Instruction], p: HardwareProfile,
             sbuf_peak: int = 0, psum_peak: int = 0, hbm_bytes: int | None = None
             ) -> KernelSchedule:
    """List-schedule ``instructions`` on ``p``'s engines (see the module docstring)."""
    free = dict.fromkeys(ENGINES, 0)
    busy = dict.fromkeys(ENGINES, 0)
    counts = dict.fromkeys(ENGINES, 0)
    written: dict[int, int] = {}  # allocation id -> end of its last writer
    read: dict[int, int] = {}  # allocation id -> end of its last reader
    timeline: list[tuple[str, str, int, int, str]] = []
    flops = moved = 0
    end_all = 0
    cache: dict[tuple[str, tuple[Any, ...]], int] = {}
    for ins in instructions:
        key = (ins.engine, tuple(sorted(ins.work.items())))
        ns = cache.get(key)
        if ns is None:
            ns = cache[key] = instruction_ns(ins, p)
        ready = max([written.get(a, 0) for a in ins.reads]
                    + [written.get(a, 0) for a in ins.writes]
                    + [read.get(a, 0) for a in ins.writes] + [0])
        start = max(ready, free[ins.engine])
        if ins.engine == "dma":
            latency = p.dma_instruction_ns
            occupy = max(0, ns - latency)  # the bandwidth is shared; the latency overlaps
            free["dma"] = start + occupy
            busy["dma"] += occupy
            end = start + ns
            moved += ins.work["bytes"] * ins.work.get("hbm", 0)
        else:
            free[ins.engine] = start + ns
            busy[ins.engine] += ns
            end = start + ns
            if ins.engine == "tensor":
                flops += 2 * ins.work["m"] * ins.work["k"] * ins.work["n"]
        counts[ins.engine] += 1
        for a in ins.reads:
            read[a] = max(read.get(a, 0), end)
        for a in ins.writes:
            written[a] = end
        end_all = max(end_all, end)
        timeline.append((ins.engine, ins.name, start, end, ins.line))
    fixed = p.dma_fixed_ns if counts["dma"] else 0
    if hbm_bytes is None:
        hbm_bytes = moved
    peak_work = KernelWork(
        matmuls=[(1, i.work["m"], i.work["k"], i.work["n"], i.work["dtype"])
                 for i in instructions if i.engine == "tensor"],
        hbm_read_bytes=hbm_bytes)
    roofline = kernel_cost(peak_work, p).roofline_ns if (flops or hbm_bytes) else 0
    total = max(end_all + fixed, roofline)
    tiles: dict[tuple[Any, ...], int] = {}
    for _, m, k, n, d in peak_work.matmuls:
        tiles[(m, k, n, d)] = tiles.get((m, k, n, d), 0) + 1
    return KernelSchedule(name, p.name, total, fixed, roofline, busy, counts, flops, hbm_bytes,
                          sbuf_peak, psum_peak, timeline,
                          [[c, *key] for key, c in sorted(tiles.items(), key=str)])
