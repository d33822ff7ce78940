"""The library's kernels as PyTorch ops (``nki_lib::``), with fake shapes and autograd.

Each op takes PyTorch's layout (``[..., D]`` for norms and softmax, ``[B, H, S, D]`` for
attention), reshapes on the host (views of the buffers, no kernel) and calls its kernel.
On neuron tensors every kernel is charged by its own schedule (``nki_op``).
"""

from __future__ import annotations

import math

import torch

from torchneuron.nki.op import nki_op

from .attention import flash_attention_bwd_kernel, flash_attention_fwd_kernel
from .moe import group_tokens, moe_experts_kernel, moe_router_kernel
from .norms import layer_norm_kernel, rms_norm_kernel, softmax_kernel

__all__ = ["flash_attention", "layer_norm", "moe", "rms_norm", "softmax"]


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1]).contiguous()


def _same_fake(x: torch.Tensor, *rest: object) -> torch.Tensor:
    return torch.empty_like(x)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return rms_norm_kernel(_rows(x), weight.contiguous(), eps).reshape(x.shape)


def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
                ) -> torch.Tensor:
    return layer_norm_kernel(_rows(x), weight.contiguous(), bias.contiguous(), eps).reshape(x.shape)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return softmax_kernel(_rows(x)).reshape(x.shape)


_rms_norm_op = nki_op("nki_lib::rms_norm", _rms_norm, fake=_same_fake)
_layer_norm_op = nki_op("nki_lib::layer_norm", _layer_norm, fake=_same_fake)
_softmax_op = nki_op("nki_lib::softmax", _softmax, fake=_same_fake)


def _rms_norm_setup(ctx, inputs, output) -> None:  # noqa: ANN001
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _rms_norm_backward(ctx, grad):  # noqa: ANN001, ANN202
    """The gradients in PyTorch ops (fp32 statistics, as the kernel computes them): a
    model can train through the NKI forward; the backward runs as the device's ops (or
    is compiled with the rest of the backward graph)."""
    x, weight = ctx.saved_tensors
    xf, gw = x.float(), grad.float() * weight.float()
    r = torch.rsqrt(xf.square().mean(-1, keepdim=True) + ctx.eps)
    dx = r * (gw - xf * r.square() * (gw * xf).mean(-1, keepdim=True))
    dw = (grad.float() * xf * r).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dw.to(weight.dtype), None


_rms_norm_op.register_autograd(_rms_norm_backward, setup_context=_rms_norm_setup)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim (``F.rms_norm(x, (D,), weight, eps)``) by the NKI kernel
    (its backward in PyTorch ops)."""
    return _rms_norm_op(x, weight, eps)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
               ) -> torch.Tensor:
    """LayerNorm over the last dim (``F.layer_norm``) by the NKI kernel."""
    return _layer_norm_op(x, weight, bias, eps)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim by the NKI kernel."""
    return _softmax_op(x)


# --- attention ---------------------------------------------------------------------------
def _bhsd(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-2], x.shape[-1]).contiguous()


def _fa_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
            ) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse = flash_attention_fwd_kernel(_bhsd(q), _bhsd(k), _bhsd(v), causal=causal,
                                          scale=scale)
    return out.reshape(q.shape), lse.reshape(q.shape[:-1])


def _fa_fwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(q), q.new_empty(q.shape[:-1], dtype=torch.float32)


def _fa_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
            grad: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dq, dk, dv = flash_attention_bwd_kernel(
        _bhsd(q), _bhsd(k), _bhsd(v), _bhsd(out), _bhsd(grad.to(q.dtype)),
        lse.reshape(-1, lse.shape[-1]).contiguous(), causal=causal, scale=scale)
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


def _fa_bwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 grad: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


_fa_fwd_op = nki_op("nki_lib::flash_attention_fwd", _fa_fwd, fake=_fa_fwd_fake)
_fa_bwd_op = nki_op("nki_lib::flash_attention_bwd", _fa_bwd, fake=_fa_bwd_fake)


def _fa_setup(ctx, inputs, output) -> None:  # noqa: ANN001
    q, k, v, causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.causal, ctx.scale = causal, scale


def _fa_backward(ctx, grad_out, grad_lse):  # noqa: ANN001, ANN202
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = _fa_bwd_op(q, k, v, out, grad_out, lse, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None


_fa_fwd_op.register_autograd(_fa_backward, setup_context=_fa_setup)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None) -> torch.Tensor:
    """``F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)`` for
    ``[..., S, D]`` tensors (S a multiple of 128, D <= 128) by the NKI FlashAttention
    kernels, forward and backward."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    return _fa_fwd_op(q, k, v, causal, float(scale))[0]


# --- mixture of experts ----------------------------------------------------------------------
def _moe(x: torch.Tensor, w_router: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
         w_down: torch.Tensor, top_k: int) -> torch.Tensor:
    t_dim, h = x.shape
    gates, experts = moe_router_kernel(x.contiguous(), w_router.contiguous(), top_k)
    block_expert, idx, row_gates = group_tokens(experts, gates, w_router.shape[1])
    x_pad = torch.cat([x, x.new_zeros(1, h)])
    out = moe_experts_kernel(x_pad, w_gate.contiguous(), w_up.contiguous(),
                             w_down.contiguous(), idx, row_gates, block_expert)
    return out[:t_dim].clone()


_moe_op = nki_op("nki_lib::moe", _moe, fake=lambda x, *rest: torch.empty_like(x))


def moe(x: torch.Tensor, w_router: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
        w_down: torch.Tensor, top_k: int = 2) -> torch.Tensor:
    """A top-k mixture of SwiGLU experts by the NKI kernels: x [T, H] (T a multiple of 128),
    w_router [H, E], w_gate / w_up [E, H, F], w_down [E, F, H]. The grouping of tokens per
    expert between the two kernels is charged as device work (``moe.grouping_schedule``)."""
    return _moe_op(x, w_router, w_gate, w_up, w_down, int(top_k))
