"""List scheduling of kernels across engines and DMA; the program's cost summary.

Why: a compiled program is faster than the sum of its kernels because engines run
concurrently. The model, in kernel order (already topological, from ``fuse``):

- a kernel starts when its producers have ended and every engine it uses (its
  compute engines and the DMA queues) is free; independent kernels on different
  engines overlap;
- double buffering: while a kernel waits (for a producer or a busy engine), the idle
  DMA queues prefetch its inputs that are already available (program arguments,
  constants, outputs of kernels that have ended), up to half of SBUF; the kernel then
  runs with that much less HBM read traffic, costed by the same ``kernel_cost``;
- an engine is busy from the kernel's start for its ``engine_ns``; the kernel ends at
  ``start + total_ns``.

Everything is integer nanoseconds and iteration order is fixed: compiling twice gives
identical schedules.
"""

from __future__ import annotations

import dataclasses

from torchneuron.hardware import HardwareProfile, kernel_cost

from ._ops import is_compute, is_constant, is_splat_constant, nbytes, value_types
from ._work import eager_baseline
from .custom_calls import plan_of, planned_cost
from .program import Kernel, Program, ProgramCost

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")


def run(program: Program, profile: HardwareProfile) -> Program:
    """Assign ``start_ns``/``end_ns`` and ``cost`` to every kernel; fill ``program.cost``."""
    fn = program.function
    types = value_types(fn)
    splats = {r for op in fn.body if is_constant(op) and is_splat_constant(op) for r in op.results}
    free = dict.fromkeys(ENGINES, 0)
    busy = dict.fromkeys(ENGINES, 0)
    produced_by: dict[str, int] = {}
    ends: list[int] = []
    kernels: list[Kernel] = []
    for idx, k in enumerate(program.kernels):
        assert k.work is not None, "schedule needs allocate to have run"
        plan = plan_of([fn.body[i] for i in k.op_indices])
        full = kernel_cost(k.work, profile) if plan is None else planned_cost(plan, profile)
        ready = {v: ends[produced_by[v]] if v in produced_by else 0 for v in k.inputs}
        deps_end = max(ready.values(), default=0)
        used = [e for e in ENGINES if full.engine_ns[e] > 0]
        start = max([deps_end] + [free[e] for e in used])
        # double buffering: prefetch available inputs on idle DMA before the kernel starts
        early = [v for v in k.inputs if ready[v] < start and v not in splats and v in types]
        avail_at = max([free["dma"]] + [ready[v] for v in early])
        window = max(0, start - avail_at)
        pre_bytes = 0 if plan is not None else min(  # (a custom call moves its own data)
            sum(nbytes(types[v]) for v in early),
            window * profile.dma_bw_per_core // 1_000_000_000,
            profile.sbuf_bytes // 2,
            k.work.hbm_read_bytes,
        )
        work = dataclasses.replace(k.work, hbm_read_bytes=k.work.hbm_read_bytes - pre_bytes)
        cost = kernel_cost(work, profile) if pre_bytes else full
        pre_ns = -(-pre_bytes * 1_000_000_000 // profile.dma_bw_per_core)
        if pre_bytes:
            free["dma"] = avail_at + pre_ns
            busy["dma"] += pre_ns
        for e in ENGINES:
            if cost.engine_ns[e] > 0:
                free[e] = max(free[e], start) + cost.engine_ns[e]
                busy[e] += cost.engine_ns[e]
        end = start + cost.total_ns
        ends.append(end)
        for v in k.outputs:
            produced_by[v] = idx
        cost_dict = {
            "engine_ns": dict(cost.engine_ns),
            "fixed_ns": cost.fixed_ns,
            "total_ns": cost.total_ns,
            "roofline_ns": cost.roofline_ns,
            "bound": cost.bound,
            "prefetch_bytes": pre_bytes,
            "unscheduled_total_ns": full.total_ns,
        }
        kernels.append(dataclasses.replace(k, cost=cost_dict, start_ns=start, end_ns=end))
    out = dataclasses.replace(program, kernels=kernels)
    out.cost = summarize(out, busy, profile)
    return out


def summarize(program: Program, busy: dict[str, int], profile: HardwareProfile) -> ProgramCost:
    """Totals of a scheduled program, next to the op-by-op baseline of the same ops."""
    body = program.function.body
    eager = eager_baseline(program.function, profile)
    works = [k.work for k in program.kernels if k.work is not None]
    return ProgramCost(
        total_ns=max((k.end_ns for k in program.kernels), default=0),
        engine_busy_ns=dict(busy),
        hbm_read_bytes=sum(w.hbm_read_bytes for w in works),
        hbm_write_bytes=sum(w.hbm_write_bytes for w in works),
        num_kernels=len(program.kernels),
        num_ops=sum(1 for op in body if is_compute(op)),
        spill_bytes=sum(k.spill_bytes for k in program.kernels),
        sbuf_peak_bytes=max((k.sbuf_bytes for k in program.kernels), default=0),
        eager_ns=eager.device_ns + eager.launch_ns,
        eager_launches=eager.launches,
        eager_hbm_read_bytes=eager.read_bytes,
        eager_hbm_write_bytes=eager.write_bytes,
    )
