"""Cost model: an engine-neutral description of one kernel -> nanoseconds on a NeuronCore.

Why engine-neutral: eager ops (``eager_work.py``) and the compiler's fused kernels describe
their work the same way (``KernelWork``), so both are timed by the same rules and eager vs
compiled comparisons differ only in what the work is, never in how it is costed.

Rules (DESIGN.md section 4; figures in ``profiles.py``):

- **TensorE**: each matmul (batch, m, k, n) is tiled to the 128x128 PE array: contraction K
  and output rows M in tiles of 128, the moving/free dim N in tiles of 512 (one PSUM bank of
  fp32 accumulators). One matmul instruction per tile initiates in ``max(n_tile * s, 64)``
  cycles at the TensorE clock, where s is 1 for bf16/fp16, 1/2 (or 1/4 on trn3) for fp8, and
  4 for fp32 and every other dtype. Back-to-back matmuls accumulating into one PSUM tile
  stream without a gap; the ~100-cycle static overhead is paid once per accumulation group
  (one output tile: stationary reload and PSUM drain).
- **VectorE / ScalarE / GpSimd**: element-ops are spread over 128 lanes; an instruction over
  N elements per lane costs ``overhead + max(N * c, 64)`` cycles at the engine's clock, with
  c = 1 for Vector/Scalar and ``gpsimd_cycles_per_elem`` (assumed 8) for GpSimd. When
  ``instructions == 0`` the count is derived: one instruction per ``tile_free_elems`` (assumed
  2048) elements per lane, at least one per engine used.
- **DMA**: ``bytes / dma_bw_per_core`` plus ~600 ns per DMA instruction, one instruction per
  ``dma_chunk_bytes`` (assumed 64 KiB) descriptor, spread over the core's 16 DMA queues.
- **Kernel** = engines overlap: ``max(engine times) + fixed`` where fixed is the ~1.3 us
  cross-engine semaphore-to-start of the first DMA (only if the kernel moves data), bounded
  below by the roofline ``max(flops / peak, bytes / hbm_bw_per_core)``.

All results are integer nanoseconds (rounded up), so simulated time is exact and portable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from .profiles import HardwareProfile, matmul_rate

__all__ = [
    "ENGINES",
    "KernelCost",
    "KernelWork",
    "eager_compile_latency_ns",
    "kernel_cost",
    "program_compile_latency_ns",
]

ENGINES: tuple[str, ...] = ("tensor", "vector", "scalar", "gpsimd", "dma")


@dataclass
class KernelWork:
    """What one kernel does, independent of engines' speeds.

    ``matmuls``: (batch, m, k, n, dtype) on TensorE, dtype a StableHLO-style name ("bf16",
    "f32", "f8E4M3FN", ...). ``*_elems``: element-operations per engine (an elementwise op
    with two inputs over N elements counts 2N). ``instructions``: 0 means derive from tiles.
    """

    matmuls: list[tuple[int, int, int, int, str]] = field(default_factory=list)
    vector_elems: int = 0
    scalar_elems: int = 0
    gpsimd_elems: int = 0
    hbm_read_bytes: int = 0
    hbm_write_bytes: int = 0
    instructions: int = 0

    @property
    def flops(self) -> int:
        """Matmul FLOPs (2 per multiply-add)."""
        return sum(2 * b * m * k * n for b, m, k, n, _ in self.matmuls)

    @property
    def hbm_bytes(self) -> int:
        return self.hbm_read_bytes + self.hbm_write_bytes

    def __add__(self, other: KernelWork) -> KernelWork:
        """Work of two kernels fused into one (instructions add; 0 stays 'derive')."""
        return KernelWork(
            matmuls=[*self.matmuls, *other.matmuls],
            vector_elems=self.vector_elems + other.vector_elems,
            scalar_elems=self.scalar_elems + other.scalar_elems,
            gpsimd_elems=self.gpsimd_elems + other.gpsimd_elems,
            hbm_read_bytes=self.hbm_read_bytes + other.hbm_read_bytes,
            hbm_write_bytes=self.hbm_write_bytes + other.hbm_write_bytes,
            instructions=self.instructions + other.instructions,
        )


@dataclass(frozen=True)
class KernelCost:
    """Time of one kernel: per-engine busy time, fixed latency, total, roofline, and bound.

    ``bound`` is the dominant term: an engine name, "fixed" (latency-bound: the fixed cost
    exceeds every engine), "hbm" or "flops" (the roofline exceeds the engine schedule).
    """

    engine_ns: dict[str, int]
    fixed_ns: int
    total_ns: int
    roofline_ns: int
    bound: str


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _ns(cycles: int, clock_hz: int) -> int:
    """Cycles at ``clock_hz`` to integer ns, rounded up (exact integer arithmetic)."""
    return _ceil_div(cycles * 1_000_000_000, clock_hz)


def _matmul_cycles(m: int, k: int, n: int, rate: Fraction, p: HardwareProfile) -> int:
    """TensorE cycles of one (m, k, n) matmul with m on the stationary side (see module doc)."""
    m_tiles = _ceil_div(m, p.pe_cols)
    k_tiles = _ceil_div(k, p.pe_rows)
    n_full, n_rest = divmod(n, p.psum_bank_fp32_cols)

    def init(n_tile: int) -> int:
        # moving columns per cycle scale with the dtype's rate; never below the min II
        return max(math.ceil(n_tile / rate), p.min_initiation_cycles)

    per_mk = n_full * init(p.psum_bank_fp32_cols) + (init(n_rest) if n_rest else 0)
    groups = m_tiles * (n_full + (1 if n_rest else 0))
    return m_tiles * k_tiles * per_mk + groups * p.instruction_overhead_cycles


def _tensor_cycles(work: KernelWork, p: HardwareProfile) -> int:
    """Sum over matmuls; each takes the cheaper orientation (C = A B or C^T = B^T A^T), as a
    compiler would pick which operand stays stationary in the PE array."""
    cycles = 0
    for batch, m, k, n, dtype in work.matmuls:
        if batch <= 0 or m <= 0 or k <= 0 or n <= 0:
            continue
        rate = Fraction(matmul_rate(dtype, p))
        cycles += batch * min(_matmul_cycles(m, k, n, rate, p), _matmul_cycles(n, k, m, rate, p))
    return cycles


def _stream_cycles(elems: int, cycles_per_elem: int, instructions: int, p: HardwareProfile) -> int:
    """Cycles of ``instructions`` instructions sharing ``elems`` element-ops over the lanes."""
    if elems <= 0:
        return 0
    per_lane = _ceil_div(elems, p.engine_lanes)
    if instructions <= 0:
        instructions = max(1, _ceil_div(per_lane, p.tile_free_elems))
    busy = per_lane * cycles_per_elem
    return instructions * p.instruction_overhead_cycles + max(
        busy, instructions * p.min_initiation_cycles
    )


def _split_instructions(work: KernelWork) -> dict[str, int]:
    """Share an explicit instruction count among the element engines by their element-ops."""
    elems = {"vector": work.vector_elems, "scalar": work.scalar_elems, "gpsimd": work.gpsimd_elems}
    total = sum(elems.values())
    if work.instructions <= 0 or total <= 0:
        return dict.fromkeys(elems, 0)
    return {e: max(1, work.instructions * v // total) if v else 0 for e, v in elems.items()}


def kernel_cost(work: KernelWork, profile: HardwareProfile) -> KernelCost:
    """Time ``work`` on one NeuronCore of ``profile`` (integer ns; see module docstring)."""
    p = profile
    instr = _split_instructions(work)
    engine_ns = {
        "tensor": _ns(_tensor_cycles(work, p), p.tensor_clock_hz),
        "vector": _ns(_stream_cycles(work.vector_elems, 1, instr["vector"], p), p.vector_clock_hz),
        "scalar": _ns(_stream_cycles(work.scalar_elems, 1, instr["scalar"], p), p.scalar_clock_hz),
        "gpsimd": _ns(
            _stream_cycles(work.gpsimd_elems, p.gpsimd_cycles_per_elem, instr["gpsimd"], p),
            p.gpsimd_clock_hz,
        ),
        "dma": 0,
    }
    nbytes = max(0, work.hbm_bytes)
    if nbytes:
        chunks = _ceil_div(nbytes, p.dma_chunk_bytes)
        rounds = _ceil_div(chunks, p.dma_engines_per_core)
        transfer = _ceil_div(nbytes * 1_000_000_000, p.dma_bw_per_core)
        engine_ns["dma"] = transfer + rounds * p.dma_instruction_ns
    fixed_ns = p.dma_fixed_ns if nbytes else 0

    flops_ns = 0
    for b, m, k, n, dtype in work.matmuls:
        peak = Fraction(p.pe_rows * p.pe_cols * 2 * p.tensor_clock_hz) * Fraction(
            matmul_rate(dtype, p)
        )
        flops_ns += math.ceil(Fraction(2 * max(0, b * m * k * n) * 1_000_000_000) / peak)
    hbm_ns = _ceil_div(nbytes * 1_000_000_000, p.hbm_bw_per_core) if nbytes else 0
    roofline_ns = max(flops_ns, hbm_ns)

    busiest = max(ENGINES, key=lambda e: engine_ns[e])  # first engine wins ties: deterministic
    schedule_ns = engine_ns[busiest] + fixed_ns
    total_ns = max(schedule_ns, roofline_ns)
    if roofline_ns > schedule_ns:
        bound = "hbm" if hbm_ns >= flops_ns else "flops"
    elif fixed_ns > engine_ns[busiest]:
        bound = "fixed"
    else:
        bound = busiest if engine_ns[busiest] > 0 else "fixed"
    return KernelCost(engine_ns, fixed_ns, total_ns, roofline_ns, bound)


def eager_compile_latency_ns(profile: HardwareProfile, enabled: bool = True) -> int:
    """Modeled latency of compiling one eager kernel to a NEFF (0 when disabled)."""
    return profile.eager_compile_ns if enabled else 0


def program_compile_latency_ns(profile: HardwareProfile, n_ops: int, enabled: bool = True) -> int:
    """Modeled latency of compiling a program of ``n_ops`` StableHLO ops (0 when disabled)."""
    if not enabled:
        return 0
    return profile.program_compile_base_ns + max(0, n_ops) * profile.program_compile_per_op_ns
