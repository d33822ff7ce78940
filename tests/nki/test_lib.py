"""The NKI library's kernels against PyTorch on CPU: norms, softmax, FlashAttention forward
and backward, the MoE block, the MXFP8 matmul (and its 4x TensorE rate on trn3), and
FP8 ``torch._scaled_mm`` charged at the FP8 rate."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchneuron.hardware import KernelWork, get_core, kernel_cost, settings
from torchneuron.nki import lib
from torchneuron.nki.lib.attention import flash_attention_bwd_kernel, flash_attention_fwd_kernel
from torchneuron.nki.lib.norms import layer_norm_kernel, rms_norm_kernel, softmax_kernel

_TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms_and_softmax(dtype):
    x = torch.randn(200, 96).to(dtype)
    w, b = torch.randn(96).to(dtype), torch.randn(96).to(dtype)
    rtol, atol = _TOL[dtype]
    torch.testing.assert_close(rms_norm_kernel(x, w), F.rms_norm(x, (96,), w, 1e-6),
                               rtol=rtol, atol=atol)
    torch.testing.assert_close(layer_norm_kernel(x, w, b), F.layer_norm(x, (96,), w, b),
                               rtol=rtol, atol=atol * 4)
    torch.testing.assert_close(softmax_kernel(x), x.softmax(-1), rtol=rtol, atol=atol)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flash_attention_forward_and_backward_match_sdpa(dtype, causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 256, 64).to(dtype) for _ in range(3))
    out, lse = flash_attention_fwd_kernel(q, k, v, causal=causal)
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
    rtol, atol = _TOL[dtype]
    torch.testing.assert_close(out.float(), ref, rtol=rtol, atol=atol * 2)
    do = torch.randn(2, 256, 64).to(dtype)
    ref.backward(do.float())
    dq, dk, dv = flash_attention_bwd_kernel(q, k, v, out, do, lse, causal=causal)
    for got, want in ((dq, qf.grad), (dk, kf.grad), (dv, vf.grad)):
        torch.testing.assert_close(got.float(), want, rtol=rtol * 2, atol=atol * 4)


def test_flash_attention_op_on_neuron_with_autograd(fresh_cores):
    q, k, v = (torch.randn(1, 2, 128, 32, requires_grad=True) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref.square().sum().backward()
    qn, kn, vn = (t.detach().to("neuron").requires_grad_() for t in (q, k, v))
    out = lib.flash_attention(qn, kn, vn, causal=True)
    out.square().sum().backward()
    torch.testing.assert_close(out.cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    for got, want in ((qn, q), (kn, k), (vn, v)):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=1e-4, atol=1e-5)
    ops = get_core(0).ops
    assert ops["nki.flash_attention_fwd_kernel"] == 1 and ops["nki.flash_attention_bwd_kernel"] == 1


def test_lib_norm_ops_on_neuron(fresh_cores):
    x, w = torch.randn(3, 50, 64), torch.randn(64)
    out = lib.rms_norm(x.to("neuron"), w.to("neuron"))
    torch.testing.assert_close(out.cpu(), F.rms_norm(x, (64,), w, 1e-6), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lib.softmax(x.to("neuron")).cpu(), x.softmax(-1))
    assert get_core(0).ops["nki.rms_norm_kernel"] == 1


def _reference_moe(x, w_router, w_gate, w_up, w_down, k):  # noqa: ANN001, ANN202
    probs = (x @ w_router).softmax(-1)
    vals, idx = probs.topk(k)
    vals = vals / vals.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(w_router.shape[1]):
        tok, slot = (idx == e).nonzero(as_tuple=True)
        y = (F.silu(x[tok] @ w_gate[e]) * (x[tok] @ w_up[e])) @ w_down[e]
        out.index_add_(0, tok, y * vals[tok, slot][:, None])
    return out


def test_moe_block_matches_plain_pytorch(fresh_cores):
    torch.manual_seed(0)
    t, h, f, e = 128, 128, 256, 4
    x, w_router = torch.randn(t, h), torch.randn(h, e)
    w_gate, w_up = torch.randn(e, h, f) / 11, torch.randn(e, h, f) / 11
    w_down = torch.randn(e, f, h) / 16
    ref = _reference_moe(x, w_router, w_gate, w_up, w_down, 2)
    torch.testing.assert_close(lib.moe(x, w_router, w_gate, w_up, w_down, 2), ref,
                               rtol=1e-4, atol=1e-4)
    out = lib.moe(*(a.to("neuron") for a in (x, w_router, w_gate, w_up, w_down)), 2)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-4)
    ops = get_core(0).ops
    assert ops["nki.moe_router_kernel"] == 1 and ops["nki.moe_experts_kernel"] == 1
    assert ops["nki.moe_group_tokens"] == 1  # the grouping is device work, charged


def _mx_emulation(x: torch.Tensor) -> torch.Tensor:
    """OCP MX (E4M3, blocks of 32 along dim 0), written independently of the kernel."""
    k, n = x.shape
    blocks = x.float().reshape(k // 32, 32, n)
    amax = blocks.abs().amax(1, keepdim=True)
    shared = torch.floor(torch.log2(amax.clamp_min(torch.finfo(torch.float32).tiny))) - 8
    scale = torch.exp2(shared)
    q = (blocks / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float()
    return (q * scale).reshape(k, n)


@pytest.fixture
def trn3():
    old = settings.current_profile()
    settings.set_hardware("trn3")
    yield
    settings.set_hardware(old)


def test_mxfp8_matmul_matches_emulation_at_4x_rate(trn3):
    torch.manual_seed(0)
    a_t, b = torch.randn(256, 128, dtype=torch.bfloat16), torch.randn(256, 512, dtype=torch.bfloat16)
    out = lib.mxfp8_matmul_kernel(a_t, b)
    ref = (_mx_emulation(a_t).T @ _mx_emulation(b)).to(torch.bfloat16)
    torch.testing.assert_close(out.float(), ref.float(), rtol=1e-2, atol=1e-1)
    assert (out.float() - a_t.float().T @ b.float()).abs().max() > 0.1  # it did quantize
    sched = lib.mxfp8_matmul_kernel.last_schedule
    p = settings.current_profile()
    overhead = p.instruction_overhead_cycles
    mx_cycles = sched.engine_busy_ns["tensor"] * p.tensor_clock_hz // 10**9 // 2
    bf16_cycles = 512 + overhead  # one bf16 128x128x512 tile: 512 moving columns
    assert abs((mx_cycles - overhead) * 4 - (bf16_cycles - overhead)) <= 8


def test_scaled_mm_fp8_is_charged_at_the_fp8_rate(fresh_cores):
    a = torch.randn(128, 256).to(torch.float8_e4m3fn)
    b = torch.randn(512, 256).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0)
    ref = torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
    on = one.to("neuron")
    out = torch._scaled_mm(a.to("neuron"), b.to("neuron"), on, on, out_dtype=torch.bfloat16)
    assert torch.equal(out.cpu(), ref)
    p = settings.current_profile()
    fp8 = kernel_cost(KernelWork(matmuls=[(1, 128, 256, 512, "f8E4M3FN")]), p).engine_ns["tensor"]
    bf16 = kernel_cost(KernelWork(matmuls=[(1, 128, 256, 512, "bf16")]), p).engine_ns["tensor"]
    assert fp8 < bf16
    from torchneuron.hardware import aten_kernel_work

    work = aten_kernel_work(torch.ops.aten._scaled_mm.default, (a, b, one, one), {}, ref)
    assert work.matmuls == [(1, 128, 256, 512, "f8E4M3FN")]


def test_mxfp8_linear_forward_backward_and_conversion(trn3, fresh_cores):
    torch.manual_seed(0)
    x, w = torch.randn(128, 64), torch.randn(96, 64)
    g = torch.randn(128, 96)
    xn = x.to("neuron").requires_grad_()
    wn = w.to("neuron").requires_grad_()
    y = lib.mxfp8_linear(xn, wn)
    y.backward(g.to("neuron"))
    emu = _mx_emulation
    torch.testing.assert_close(y.detach().cpu(), emu(x.T).T @ emu(w.T), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(xn.grad.cpu(), emu(g.T).T @ emu(w), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(wn.grad.cpu(), emu(g).T @ emu(x), rtol=1e-4, atol=1e-3)
    assert get_core(0).ops["nki.mxfp8_matmul_kernel"] == 3

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
    lib.convert_to_mxfp8(model)
    assert all(type(m) is lib.MXFP8Linear for m in (model[0], model[2]))
    model.to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xb, yb = torch.randn(128, 64).to("neuron"), torch.randn(128, 32).to("neuron")
    losses = []
    for _ in range(3):
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
