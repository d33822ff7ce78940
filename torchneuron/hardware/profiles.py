"""Hardware profiles: the public figures of one physical NeuronCore, plus assumed costs.

Why a frozen dataclass: a profile is a value. Simulated time is a pure function of the op
stream, the profile and the settings, so a profile must not change under a running program;
overrides go through ``dataclasses.replace`` and produce a new profile.

One device index models one *physical* NeuronCore (LNC=1). Chip-level figures (HBM size and
bandwidth) are divided by ``cores_per_chip``.

Sources (AWS Neuron SDK documentation, awsdocs-neuron.readthedocs-hosted.com):

- [T2]  "Trainium2 Architecture" (about-neuron/arch/neuron-hardware/trainium2)
- [NC3] "NeuronCore-v3 Architecture" (about-neuron/arch/neuron-hardware/neuron-core-v3)
- [N2]  "Trainium2 Architecture Guide for NKI" (nki/guides/architecture/trainium2_arch)
- [T3]  "Trainium3 Architecture" (about-neuron/arch/neuron-hardware/trainium3)
- [N3]  "Trainium3 Architecture Guide for NKI" (nki/about/trainium3_arch)
- [NA]  "Trainium/Inferentia2 Architecture Guide for NKI" (engine model, PSUM banks)
- [NP]  "NKI performance guide" (instruction initiation interval and static overhead)

Fields without a public figure are **assumed**; they are listed in ``ASSUMED_FIELDS`` so that
reports can print which assumptions were in force.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["ASSUMED_FIELDS", "PROFILES", "HardwareProfile", "get_profile"]

_GIB = 1024**3
_MIB = 1024**2


@dataclass(frozen=True)
class HardwareProfile:
    """Figures of one physical NeuronCore and the host costs around it. Times in ns."""

    name: str  # profile key, e.g. "trn2"
    core_version: str  # "NeuronCore-v3" [NC3] / "NeuronCore-v4" [T3]
    cores_per_chip: int  # physical NeuronCores per chip: 8 [T2][T3]

    # --- TensorE (systolic array) ---
    pe_rows: int  # 128x128 processing elements [NA][N2]
    pe_cols: int
    tensor_clock_hz: int  # 2.4 GHz; 128*128*2*2.4e9 = 78.6 TFLOPS ~ "79 BF16 TFLOPS" [NC3]
    published_bf16_tflops: float  # per-core BF16 peak as published: 79 [NC3] / 671/8 [T3]
    fp8_speedup: int  # FP8 rate / BF16 rate: 158/79 = 2 [NC3]; MXFP8 315/79 = 4 [T3]
    fp32_slowdown: int  # FP32 matmul ~4x slower than BF16 [N2] (181 FP32 vs 667 BF16 TFLOPS [T2])

    # --- Vector / Scalar / GpSimd engines ---
    vector_clock_hz: int  # 0.96 GHz [N2]; 1.2 GHz [N3]
    scalar_clock_hz: int  # 1.2 GHz [N2][N3]
    gpsimd_clock_hz: int  # 1.2 GHz [N2][N3]
    engine_lanes: int  # 128 lanes = SBUF partitions [NA]
    gpsimd_cycles_per_elem: int  # **assumed**: irregular gather/scatter/sort: 8 cycles/elem/lane
    tile_free_elems: int  # **assumed**: free-dim elements one instruction covers when derived

    # --- on-chip memories ---
    sbuf_bytes: int  # 28 MiB = 128 x 224 KiB [NC3]; 32 MiB [N3]
    sbuf_partitions: int  # 128 [NA]
    psum_bytes: int  # 2 MiB = 128 partitions x 16 KiB [N2][N3]
    psum_banks: int  # 8 banks of 2 KiB per partition [NA]
    psum_bank_bytes: int  # 2 KiB per partition per bank [NA]
    psum_bank_fp32_cols: int  # 512 fp32 accumulators per bank row: matmul free-dim tile [NA]

    # --- HBM and DMA ---
    hbm_bytes_per_chip: int  # 96 GiB [N2] / 144 GiB [T3]
    hbm_bw_per_chip: int  # bytes/s: 2.9 TB/s [N2] / 4.9 TB/s [T3]
    dma_engines_per_core: int  # 128 DMA engines per chip / 8 cores = 16 [N2][N3]
    dma_bw_per_core: int  # bytes/s: 368 GB/s (DESIGN table, from [N2]); 528 GB/s [N3]
    dma_chunk_bytes: int  # **assumed**: bytes per DMA descriptor (one DGE instruction): 64 KiB

    # --- instruction costs [NP] ---
    min_initiation_cycles: int  # ~64-cycle minimum initiation interval per instruction [NP]
    instruction_overhead_cycles: int  # ~100-cycle static overhead per instruction [NP]
    dma_fixed_ns: int  # ~1.3 us semaphore-to-start, cross-engine [NP]
    dma_instruction_ns: int  # ~600 ns per DGE DMA instruction [NP]

    # --- host side: no public figures, all **assumed** ---
    host_dispatch_ns: int  # eager Python/aten dispatch per op
    kernel_launch_ns: int  # runtime launch of one eager kernel
    eager_compile_ns: int  # first use of an (op, shapes, dtypes): compile one NEFF
    executable_launch_ns: int  # runtime launch of one compiled executable
    guard_check_ns: int  # adaptive eager: guard check per deferred op
    record_ns: int  # adaptive eager: recording one op
    graph_guard_ns: int  # torch.compile: guard evaluation per compiled-graph call
    program_compile_base_ns: int  # compile latency of a program: fixed part
    program_compile_per_op_ns: int  # compile latency of a program: per StableHLO op
    # adaptive eager's first tier: a recorded op sequence issued to the runtime as one batch
    # of the eager kernels it already compiled (as a CUDA Graph replays recorded launches:
    # the per-kernel work left is the device-side descriptor, not the host's launch call)
    recorded_batch_launch_ns: int = 20_000  # one submission of a recorded batch
    recorded_kernel_launch_ns: int = 2_000  # each kernel of a recorded batch
    # background compiles running at once (a trn2.48xlarge host has 192 vCPUs, and
    # neuron_parallel_compile compiles a model's graphs concurrently; how many at once is
    # not published)
    compile_parallelism: int = 8

    # --- derived figures ---
    @property
    def hbm_bytes_per_core(self) -> int:
        """HBM capacity of one physical core (chip HBM / cores_per_chip)."""
        return self.hbm_bytes_per_chip // self.cores_per_chip

    @property
    def hbm_bw_per_core(self) -> int:
        """HBM bandwidth of one physical core in bytes/s (chip bandwidth / cores_per_chip)."""
        return self.hbm_bw_per_chip // self.cores_per_chip

    @property
    def bf16_flops(self) -> float:
        """TensorE dense BF16 peak in FLOP/s: rows * cols * 2 (multiply-add) * clock."""
        return float(self.pe_rows * self.pe_cols * 2 * self.tensor_clock_hz)

    def matmul_flops(self, dtype: str) -> float:
        """TensorE peak FLOP/s for a matmul whose inputs have ``dtype``."""
        rate = matmul_rate(dtype, self)
        return self.bf16_flops * rate

    def assumptions(self) -> dict[str, object]:
        """The assumed fields and their values, for reports."""
        return {f: getattr(self, f) for f in ASSUMED_FIELDS}

    def describe_assumptions(self) -> str:
        """One line per assumed figure, e.g. ``host_dispatch_ns = 15000 (assumed)``."""
        head = f"{self.name} ({self.core_version}): figures with no public source"
        return "\n".join([head, *(f"  {k} = {v} (assumed)" for k, v in self.assumptions().items())])


def matmul_rate(dtype: str, profile: HardwareProfile) -> float:
    """Matmul throughput relative to BF16: fp8 faster, bf16/f16 full rate, others as fp32."""
    d = dtype.lower()
    if d.startswith("f8") or d.startswith("float8") or "fp8" in d:
        return float(profile.fp8_speedup)
    if d in ("bf16", "f16", "bfloat16", "float16", "half"):
        return 1.0
    return 1.0 / profile.fp32_slowdown


ASSUMED_FIELDS: tuple[str, ...] = (
    "gpsimd_cycles_per_elem",
    "tile_free_elems",
    "dma_chunk_bytes",
    "host_dispatch_ns",
    "kernel_launch_ns",
    "eager_compile_ns",
    "executable_launch_ns",
    "guard_check_ns",
    "record_ns",
    "graph_guard_ns",
    "program_compile_base_ns",
    "program_compile_per_op_ns",
    "recorded_batch_launch_ns",
    "recorded_kernel_launch_ns",
    "compile_parallelism",
)

_TRN2 = HardwareProfile(
    name="trn2",
    core_version="NeuronCore-v3",
    cores_per_chip=8,
    pe_rows=128,
    pe_cols=128,
    tensor_clock_hz=2_400_000_000,
    published_bf16_tflops=79.0,
    fp8_speedup=2,
    fp32_slowdown=4,
    vector_clock_hz=960_000_000,
    scalar_clock_hz=1_200_000_000,
    gpsimd_clock_hz=1_200_000_000,
    engine_lanes=128,
    gpsimd_cycles_per_elem=8,
    tile_free_elems=2048,
    sbuf_bytes=28 * _MIB,
    sbuf_partitions=128,
    psum_bytes=2 * _MIB,
    psum_banks=8,
    psum_bank_bytes=2048,
    psum_bank_fp32_cols=512,
    hbm_bytes_per_chip=96 * _GIB,
    hbm_bw_per_chip=2_900_000_000_000,
    dma_engines_per_core=16,
    dma_bw_per_core=368_000_000_000,
    dma_chunk_bytes=64 * 1024,
    min_initiation_cycles=64,
    instruction_overhead_cycles=100,
    dma_fixed_ns=1_300,
    dma_instruction_ns=600,
    host_dispatch_ns=15_000,
    kernel_launch_ns=10_000,
    eager_compile_ns=150_000_000,
    executable_launch_ns=20_000,
    guard_check_ns=1_000,
    record_ns=500,
    graph_guard_ns=5_000,
    program_compile_base_ns=2_000_000_000,
    program_compile_per_op_ns=20_000_000,
)

_TRN3 = dataclasses.replace(
    _TRN2,
    name="trn3",
    core_version="NeuronCore-v4",
    published_bf16_tflops=671.0 / 8,  # 671 chip BF16 TFLOPS / 8 cores [T3]
    fp8_speedup=4,  # 315 MXFP8 / 79 BF16 per core [T3]
    vector_clock_hz=1_200_000_000,  # [N3]
    sbuf_bytes=32 * _MIB,  # [N3]
    hbm_bytes_per_chip=144 * _GIB,  # [T3]
    hbm_bw_per_chip=4_900_000_000_000,  # [T3]
    dma_bw_per_core=528_000_000_000,  # DESIGN table [N3]
)

PROFILES: dict[str, HardwareProfile] = {"trn2": _TRN2, "trn3": _TRN3}


def get_profile(name: str) -> HardwareProfile:
    """Return the named profile; raise ValueError listing the valid names otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        valid = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown hardware profile {name!r}; valid names: {valid}") from None
