"""The NKI language on CPU values (``nki.simulate``): the issue's kernels against PyTorch,
the schedule's determinism, and one test per hardware rule's error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from tests.nki.example_kernels import add_kernel, matmul_kernel, nl_matmul_kernel, tiled_add_kernel
from torchneuron import nki
from torchneuron.hardware import settings


@pytest.fixture
def trn3():
    old = settings.current_profile()
    settings.set_hardware("trn3")
    yield
    settings.set_hardware(old)


def test_add_matches_torch_on_numpy_and_torch():
    a, b = torch.randn(512, 384), torch.randn(512, 384)
    assert torch.equal(nki.simulate(add_kernel)(a, b), a + b)
    out = nki.simulate(add_kernel)(a.numpy(), b.numpy())
    assert isinstance(out, np.ndarray) and np.array_equal(out, (a + b).numpy())


@pytest.mark.parametrize("shape,dtype", [((300, 1100), torch.float32), ((128, 64), torch.bfloat16)])
def test_tiled_add_ragged_tiles(shape, dtype):
    a, b = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    assert torch.equal(nki.simulate(tiled_add_kernel)(a, b), a + b)
    assert torch.equal(nki.simulate(tiled_add_kernel)(a, b, fmax=128), a + b)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
def test_matmul_accumulates_in_fp32_psum(dtype, tol):
    a_t, b = torch.randn(256, 256).to(dtype), torch.randn(256, 1024).to(dtype)
    ref = (a_t.float().T @ b.float()).to(dtype)
    out = nki.simulate(matmul_kernel)(a_t, b)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref.float(), rtol=tol, atol=tol * 16)


def test_nl_matmul_transposes_the_left_operand():
    a, b = torch.randn(128, 128), torch.randn(128, 512)
    torch.testing.assert_close(nki.simulate(nl_matmul_kernel)(a, b), a @ b, rtol=1e-4, atol=1e-3)


def test_schedule_is_deterministic_and_reported():
    a_t, b = torch.randn(256, 128, dtype=torch.bfloat16), torch.randn(256, 512, dtype=torch.bfloat16)
    matmul_kernel(a_t, b)
    first = matmul_kernel.last_schedule
    matmul_kernel(a_t, b)
    second = matmul_kernel.last_schedule
    assert first.total_ns == second.total_ns and first.timeline == second.timeline
    assert first.instruction_counts["tensor"] == 2 and first.engine_busy_ns["tensor"] > 0
    assert first.flops == 2 * 128 * 256 * 512
    assert 0 < first.roofline_share <= 1
    text = matmul_kernel.report()
    assert "roofline" in text and "tensor" in text and "dma" in text


def test_engines_overlap_across_independent_tiles():
    """Tiles of different iterations pipeline: the kernel takes less than the sum of its
    instructions' times on all engines."""
    a = torch.randn(1024, 512)
    add_kernel(a, a)
    s = add_kernel.last_schedule
    serial = sum(e - st for _, _, st, e, _ in s.timeline)
    assert s.total_ns < serial


def test_fp32_matmul_is_slower_than_bf16():
    a, b = torch.randn(128, 128), torch.randn(128, 512)
    matmul_kernel(a, b)
    fp32 = matmul_kernel.last_schedule.engine_busy_ns["tensor"]
    matmul_kernel(a.bfloat16(), b.bfloat16())
    bf16 = matmul_kernel.last_schedule.engine_busy_ns["tensor"]
    assert fp32 > 2 * bf16


def test_python_metaprogramming_and_spmd_grid():
    @nki.jit
    def scale_rows(a, factors):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        tile = nl.load(a[i * 128:(i + 1) * 128, :])
        for f in factors:  # a Python list unrolled at trace time
            tile = nl.multiply(tile, f)
        nl.store(out[i * 128:(i + 1) * 128, :], value=tile)
        return out

    a = torch.randn(384, 32)
    torch.testing.assert_close(scale_rows[3](a, [2.0, 0.5, 3.0]), a * 3.0)


def test_elementwise_reductions_and_masks():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        e = nl.exp(nl.subtract(t, nl.max(t, axis=1, keepdims=True)))
        s = nl.sum(e, axis=1, keepdims=True)
        r = nisa.activation(nl.tanh, t, scale=0.5, bias=nl.mean(t, axis=1, keepdims=True))
        nl.store(out[:, 0:1], value=s)
        nl.store(out[:, 1:2], value=nl.sum(r, axis=1, keepdims=True))
        i_p = nl.arange(128)[:, None]
        nl.store(out[:, 2:3], value=nl.copy(nl.min(t, axis=1, keepdims=True)), mask=(i_p < 64))
        return out

    x = torch.randn(128, 40)
    out = k(x)
    ref_s = torch.exp(x - x.amax(1, keepdim=True)).sum(1)
    ref_r = torch.tanh(x * 0.5 + x.mean(1, keepdim=True)).sum(1)
    torch.testing.assert_close(out[:, 0], ref_s, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[:, 1], ref_r, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[:64, 2], x[:64].amin(1))
    assert torch.equal(out[64:, 2], torch.zeros(64))


# --- one test per hardware rule ---------------------------------------------------------------
def _raises(kernel, *args, match):
    with pytest.raises(nki.NKIError, match=match) as info:
        nki.simulate(kernel)(*args)
    assert "test_language.py" in info.value.where  # the user's kernel line
    return info.value


def test_rule_partition_dimension():
    @nki.jit
    def k(a):
        nl.load(a[0:256, :])

    e = _raises(k, torch.zeros(256, 4), match=r"nl.load: .*partition dimension <= 128")
    assert e.instruction == "nl.load"

    @nki.jit
    def k2(a):
        nl.ndarray((129, 4), dtype=nl.float32)

    _raises(k2, torch.zeros(1), match=r"nl.ndarray: .*129 partitions")


def test_rule_sbuf_capacity_of_the_profile(trn3):
    @nki.jit
    def k(a, n):
        tiles = [nl.ndarray((128, 16 * 1024), dtype=nl.float32) for _ in range(n)]
        assert len(tiles) == n

    nki.simulate(k)(torch.zeros(1), 3)  # 192 KiB of trn3's 256 KiB per partition
    _raises(k, torch.zeros(1), 5, match=r"SBUF capacity of trn3: 262144 bytes per partition")
    settings.set_hardware("trn2")
    _raises(k, torch.zeros(1), 4, match=r"SBUF capacity of trn2: 229376 bytes per partition")


def test_rule_tiles_out_of_scope_are_freed():
    @nki.jit
    def k(a):
        for _ in nl.affine_range(20):  # each iteration's tile replaces the last one's
            t = nl.ndarray((128, 16 * 1024), dtype=nl.float32)
        del t

    nki.simulate(k)(torch.zeros(1))
    assert k.last_schedule.sbuf_peak_bytes == 2 * 64 * 1024


def test_rule_psum_capacity_and_bank():
    @nki.jit
    def k(a, n, cols):
        tiles = [nl.zeros((128, cols), nl.float32, buffer=nl.psum) for _ in range(n)]
        assert len(tiles) == n

    nki.simulate(k)(torch.zeros(1), 8, 512)
    _raises(k, torch.zeros(1), 9, 512, match=r"PSUM capacity of trn2: 16384 bytes per partition")
    _raises(k, torch.zeros(1), 1, 1024, match=r"PSUM tile fits one bank: <= 2048 bytes")


def test_rule_psum_holds_fp32():
    @nki.jit
    def k(a):
        nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.psum)

    _raises(k, torch.zeros(1), match=r"PSUM holds fp32 accumulators")


def test_rule_matmul_tile_limits():
    @nki.jit
    def k(a, b):
        nisa.nc_matmul(nl.load(a), nl.load(b))

    _raises(k, torch.zeros(128, 256), torch.zeros(128, 64), match=r"stationary free size <= 128")
    _raises(k, torch.zeros(128, 128), torch.zeros(128, 1024), match=r"moving free size <= 512")
    _raises(k, torch.zeros(64, 128), torch.zeros(32, 128), match=r"share the contraction")
    nki.simulate(k)(torch.zeros(128, 128), torch.zeros(128, 512))


def test_rule_matmul_operands_in_sbuf_and_output_in_psum():
    @nki.jit
    def k(a):
        p = nisa.nc_matmul(nl.load(a), nl.load(a))
        assert p.buffer == "psum" and p.dtype == nl.float32
        nisa.nc_matmul(p, nl.load(a))

    _raises(k, torch.zeros(128, 128), match=r"TensorE reads its operands from SBUF")


def test_rule_engine_dtypes():
    @nki.jit
    def k(a):
        nisa.nc_matmul(nl.load(a), nl.load(a))

    _raises(k, torch.zeros(128, 128, dtype=torch.int32), match=r"dtype int32 .*TensorE reads float32")
    _raises(k, torch.zeros(128, 128, dtype=torch.float64), match=r"no 64-bit datapath")


def test_rule_hbm_and_partition_axis():
    @nki.jit
    def compute_on_hbm(a):
        nl.exp(a)

    _raises(compute_on_hbm, torch.zeros(4, 4), match=r"nl.exp: .*never HBM")

    @nki.jit
    def load_from_sbuf(a):
        nl.load(nl.load(a))

    _raises(load_from_sbuf, torch.zeros(4, 4), match=r"nl.load reads HBM")

    @nki.jit
    def store_to_sbuf(a):
        t = nl.load(a)
        nl.store(t, value=t)

    _raises(store_to_sbuf, torch.zeros(4, 4), match=r"nl.store writes HBM")

    @nki.jit
    def partition_sum(a):
        nl.sum(nl.load(a), axis=0)

    _raises(partition_sum, torch.zeros(4, 4), match=r"axis 0 includes the partition axis.*free axes")


def test_rule_mx_needs_trn3():
    @nki.jit
    def k(a):
        nisa.quantize_mx(nl.load(a))

    _raises(k, torch.zeros(64, 8), match=r"NeuronCore-v4 \(trn3\) only")


def test_outside_a_kernel_is_a_clear_error():
    with pytest.raises(RuntimeError, match="outside an NKI kernel"):
        nl.zeros((4, 4), nl.float32)
