"""SBUF/PSUM allocation per kernel, spills, and the kernel's final ``KernelWork``.

Why here: only after allocation do we know a kernel's true HBM traffic. Boundary
inputs/outputs always cross HBM; intermediates stay in SBUF while the working set
(``_footprint``) fits ``profile.sbuf_bytes``. When it does not:

1. a matmul's stationary operand that does not fit beside the streamed blocks is split
   into column panels, and the streamed (moving) inputs are re-read once per extra
   panel ("reload" traffic);
2. if the streamed blocks alone overflow, the largest intermediates spill: written to
   HBM and read back (2x their size).

Both count as ``spill_bytes`` and are added to the kernel's HBM reads/writes.
"""

from __future__ import annotations

import dataclasses

from torchneuron.compiler.stablehlo import TensorType
from torchneuron.hardware import HardwareProfile, KernelWork

from ._footprint import fit, footprint, splat_values
from ._ops import users, value_types
from ._work import op_work
from .custom_calls import plan_of, planned_work
from .program import Kernel, Program


def allocate_kernel(
    program: Program,
    kernel: Kernel,
    profile: HardwareProfile,
    use: dict[str, list[int]],
    types: dict[str, TensorType],
    splats: set[str],
) -> Kernel:
    """One kernel's boundary, SBUF/PSUM bytes, spills and total work."""
    body = program.function.body
    fp = footprint(body, kernel.op_indices, use, types, profile, splats)
    sbuf, extra_read, extra_write, spill = fit(fp, profile.sbuf_bytes)
    work = KernelWork()
    outputs = set(fp.outputs)
    engines = kernel.engines or ["vector"] * len(kernel.op_indices)
    for i, engine in zip(kernel.op_indices, engines, strict=True):
        op = body[i]
        work = work + op_work(op, engine, materialized=any(r in outputs for r in op.results))
    work.hbm_read_bytes = fp.read_bytes + extra_read
    work.hbm_write_bytes = fp.write_bytes + extra_write
    plan = plan_of([body[i] for i in kernel.op_indices])
    if plan is not None:  # a custom call: its own kernel's work (custom_calls.py)
        work = planned_work(plan)
    elif all(e == "none" for e in engines):
        # only reshapes/bitcasts: the output aliases the input buffer, nothing moves
        work, sbuf, spill = KernelWork(), 0, 0
    return dataclasses.replace(
        kernel,
        inputs=list(fp.inputs),
        outputs=list(fp.outputs),
        work=work,
        sbuf_bytes=sbuf,
        psum_bytes=min(fp.psum_bytes, profile.psum_bytes),
        spill_bytes=spill,
    )


def run(program: Program, profile: HardwareProfile) -> Program:
    """Allocate every kernel; kernels are independent here (each runs to completion)."""
    fn = program.function
    use, types, splats = users(fn), value_types(fn), splat_values(fn.body)
    kernels = [allocate_kernel(program, k, profile, use, types, splats) for k in program.kernels]
    return dataclasses.replace(program, kernels=kernels)
