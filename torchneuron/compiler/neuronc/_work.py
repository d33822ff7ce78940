"""Engine work of single ops, and the op-by-op (eager) baseline built from it.

Why one place: a fused kernel's work is the sum of its ops' compute plus only its
boundary traffic; the eager baseline is the same compute with every op paying full
HBM traffic and a launch. Sharing the per-op rule keeps that comparison honest.

Custom calls are costed in the baseline as eager runs them, not as vector ops: a call of
eager's own kernel for an aten op by its ``costed`` form (passes over its largest
tensor, as in a compiled kernel), and an NKI call by its plan, each of its kernels one
eager launch timed by the kernel's own schedule (as ``nki_op`` charges them eagerly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torchneuron.compiler.stablehlo import Function, Operation
from torchneuron.hardware import HardwareProfile, KernelWork, kernel_cost

from ._footprint import fit, footprint, splat_values
from ._ops import (
    eager_cost,
    is_compute,
    kind,
    matmul_shape,
    nbytes,
    numel,
    short,
    users,
    value_types,
)
from .assign_engines import engine_of
from .custom_calls import plan_of, planned_cost


def op_work(op: Operation, engine: str, materialized: bool = True) -> KernelWork:
    """Compute (no HBM traffic) of one op on ``engine``.

    A broadcast that only feeds other ops of its kernel is an access pattern (stride 0)
    and costs nothing; materialized, it is a copy on VectorE.
    """
    out = numel(op.result_types[0]) if op.result_types else 0
    name = short(op.name)
    costed = eager_cost(op)
    if costed is not None:  # eager's kernel for an aten op: passes over its largest tensor
        n = max(numel(t) for t in [*op.operand_types, *op.result_types])
        return KernelWork(vector_elems=int(costed["vector"]) * n,
                          scalar_elems=int(costed["scalar"]) * n)
    if engine == "tensor":
        b, m, k, n = matmul_shape(op)
        return KernelWork(matmuls=[(b, m, k, n, op.operand_types[0].dtype)])
    if engine == "scalar":
        return KernelWork(scalar_elems=out)
    if engine == "gpsimd":
        if name == "sort":
            return KernelWork(gpsimd_elems=out * max(1, math.ceil(math.log2(max(out, 2)))))
        if name in ("scatter", "dynamic_update_slice") and len(op.operand_types) > 1:
            return KernelWork(gpsimd_elems=numel(op.operand_types[-1]))
        return KernelWork(gpsimd_elems=out)
    if engine in ("dma", "none"):
        return KernelWork()
    if kind(op) == "reduce":
        half = max(1, len(op.operand_types) // 2)
        return KernelWork(vector_elems=sum(numel(t) for t in op.operand_types[:half]))
    if name in ("broadcast_in_dim", "broadcast", "transpose", "convert"):
        return KernelWork(vector_elems=out if materialized or name != "broadcast_in_dim" else 0)
    return KernelWork(vector_elems=out * max(1, len(op.operands)))


def op_engine(op: Operation) -> str:
    """Engine of a lone op (the eager baseline has no kernel to look it up in)."""
    return engine_of(op)


@dataclass
class EagerBaseline:
    """What running the same ops one kernel each would cost."""

    device_ns: int = 0
    launches: int = 0
    launch_ns: int = 0
    read_bytes: int = 0
    write_bytes: int = 0


def eager_baseline(fn: Function, profile: HardwareProfile) -> EagerBaseline:
    """Every compute op but views is a kernel with full HBM traffic and a launch.

    Each such kernel is allocated by the same rule as compiled ones (``_footprint.fit``),
    so a matmul too big for SBUF pays the same panel reloads in both columns.
    """
    base = EagerBaseline()
    use, types, splats = users(fn), value_types(fn), splat_values(fn.body)
    for i, op in enumerate(fn.body):
        plan = plan_of([op])
        if plan is not None:  # an NKI call: its kernels, one eager launch each
            launches = len(plan.get("kernels", []))
            base.device_ns += planned_cost(plan, profile).total_ns
            base.launches += launches
            base.launch_ns += launches * profile.kernel_launch_ns
            # (its DMA bytes both ways: a schedule does not split them, as planned_work)
            base.read_bytes += int(plan.get("hbm_bytes", 0))
            continue
        engine = op_engine(op)
        if not is_compute(op) or engine == "none":
            continue
        work = op_work(op, engine)
        seen = dict(zip(op.operands, op.operand_types, strict=False))
        _, extra_read, extra_write, _ = fit(
            footprint(fn.body, [i], use, types, profile, splats), profile.sbuf_bytes
        )
        work.hbm_read_bytes = sum(nbytes(t) for t in seen.values()) + extra_read
        work.hbm_write_bytes = sum(nbytes(t) for t in op.result_types) + extra_write
        base.device_ns += kernel_cost(work, profile).total_ns
        base.launches += 1
        base.launch_ns += profile.kernel_launch_ns
        base.read_bytes += work.hbm_read_bytes
        base.write_bytes += work.hbm_write_bytes
    return base
