"""The cost model: big matmuls are TensorE-bound near roofline, fp32 is ~4x slower."""

from __future__ import annotations

from torchneuron.hardware import KernelWork, get_profile, kernel_cost

N = 4096


def _square_mm(dtype: str, itemsize: int) -> KernelWork:
    return KernelWork(
        matmuls=[(1, N, N, N, dtype)],
        hbm_read_bytes=2 * N * N * itemsize,
        hbm_write_bytes=N * N * itemsize,
    )


def test_big_bf16_matmul_is_tensor_bound_near_roofline() -> None:
    p = get_profile("trn2")
    cost = kernel_cost(_square_mm("bf16", 2), p)
    assert cost.bound == "tensor"
    flops_ns = 2 * N**3 / p.bf16_flops * 1e9
    assert cost.roofline_ns >= flops_ns
    assert cost.total_ns <= 1.3 * flops_ns
    assert all(isinstance(v, int) for v in cost.engine_ns.values())
    assert isinstance(cost.total_ns, int)


def test_fp32_matmul_is_about_4x_slower() -> None:
    p = get_profile("trn2")
    bf16 = kernel_cost(_square_mm("bf16", 2), p).total_ns
    f32 = kernel_cost(_square_mm("f32", 4), p).total_ns
    assert 3.6 < f32 / bf16 < 4.4
    fp8 = kernel_cost(_square_mm("f8E4M3FN", 1), p).total_ns
    assert 1.8 < bf16 / fp8 < 2.2


def test_small_matmul_pays_min_initiation_interval() -> None:
    p = get_profile("trn2")
    narrow = kernel_cost(KernelWork(matmuls=[(1, 128, 128, 8, "bf16")]), p)
    wide = kernel_cost(KernelWork(matmuls=[(1, 128, 128, 64, "bf16")]), p)
    assert narrow.engine_ns["tensor"] == wide.engine_ns["tensor"]  # both cost 64 cycles


def test_engines_overlap_and_bound_names_dominant_term() -> None:
    p = get_profile("trn2")
    vec = KernelWork(vector_elems=128 * 100_000)
    both = KernelWork(vector_elems=128 * 100_000, scalar_elems=128 * 1_000)
    assert kernel_cost(vec, p).bound == "vector"
    assert kernel_cost(both, p).total_ns == kernel_cost(vec, p).total_ns
    dma = kernel_cost(KernelWork(hbm_read_bytes=1 << 30), p)
    assert dma.bound in ("dma", "hbm")
    assert dma.total_ns >= (1 << 30) * 1e9 / p.hbm_bw_per_core
    tiny = kernel_cost(KernelWork(vector_elems=1, hbm_read_bytes=4, hbm_write_bytes=4), p)
    assert tiny.bound == "fixed"
    assert kernel_cost(KernelWork(), p).total_ns == 0


def test_explicit_instruction_count_adds_overhead() -> None:
    p = get_profile("trn2")
    derived = kernel_cost(KernelWork(vector_elems=128 * 4096), p).engine_ns["vector"]
    many = kernel_cost(KernelWork(vector_elems=128 * 4096, instructions=64), p).engine_ns["vector"]
    assert many > derived


def test_trn3_moves_bytes_faster() -> None:
    work = KernelWork(hbm_read_bytes=1 << 28)
    assert (
        kernel_cost(work, get_profile("trn3")).total_ns
        < kernel_cost(work, get_profile("trn2")).total_ns
    )


def test_skinny_matmul_uses_cheaper_orientation() -> None:
    p = get_profile("trn2")
    gemv = kernel_cost(KernelWork(matmuls=[(1, 1, 4096, 4096, "bf16")]), p)
    vgem = kernel_cost(KernelWork(matmuls=[(1, 4096, 4096, 1, "bf16")]), p)
    assert gemv.engine_ns["tensor"] == vgem.engine_ns["tensor"]
    # 32 stationary tiles x 32 contraction tiles, each at the 64-cycle minimum
    assert gemv.engine_ns["tensor"] < (32 * 32 * 64 + 32 * 100) * 1.01 / 2.4
