"""Fused or composite aten ops spelled out as the plain ops they stand for.

``_transformer_encoder_layer_fwd`` (nn.TransformerEncoderLayer's inference fast path, one
fused op with no decomposition in PyTorch), ``_cdist_forward`` / ``_pdist_forward``, and
``_scaled_dot_product_flash_attention_for_cpu`` (what SDPA picks on CPU: tagged random, so
it was refused; with ``dropout_p == 0`` it draws nothing and PyTorch's own decomposition,
math attention, is exact).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["COMPOSITE_DECOMPOSITIONS"]

aten = torch.ops.aten
COMPOSITE_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(COMPOSITE_DECOMPOSITIONS)


# --------------------------------------------------------------------------- fast paths
# nn.TransformerEncoderLayer's inference fast path (eval + no_grad) is one fused aten op
# with no decomposition in PyTorch; spelled out here as the layer's own Python path.
@_register(aten._transformer_encoder_layer_fwd.default)
def transformer_encoder_layer_fwd(
    src: torch.Tensor, embed_dim: int, num_heads: int, qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor, proj_weight: torch.Tensor, proj_bias: torch.Tensor,
    use_gelu: bool, norm_first: bool, eps: float, norm_weight_1: torch.Tensor,
    norm_bias_1: torch.Tensor, norm_weight_2: torch.Tensor, norm_bias_2: torch.Tensor,
    ffn_weight_1: torch.Tensor, ffn_bias_1: torch.Tensor, ffn_weight_2: torch.Tensor,
    ffn_bias_2: torch.Tensor, mask: torch.Tensor | None = None, mask_type: int | None = None,
) -> Any:
    import torch.nn.functional as F

    if mask is not None:
        return NotImplemented
    b, t, _ = src.shape
    head = embed_dim // num_heads

    def attention(h: torch.Tensor) -> torch.Tensor:
        q, k, v = F.linear(h, qkv_weight, qkv_bias).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, num_heads, head).transpose(1, 2) for z in (q, k, v))
        # math attention (SDPA would pick a CPU flash kernel tagged as random)
        weights = torch.softmax((q @ k.transpose(-2, -1)) * head**-0.5, dim=-1)
        out = weights @ v
        return F.linear(out.transpose(1, 2).reshape(b, t, embed_dim), proj_weight, proj_bias)

    def feed_forward(h: torch.Tensor) -> torch.Tensor:
        act = F.gelu if use_gelu else F.relu
        return F.linear(act(F.linear(h, ffn_weight_1, ffn_bias_1)), ffn_weight_2, ffn_bias_2)

    def ln1(h: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(h, (embed_dim,), norm_weight_1, norm_bias_1, eps)

    def ln2(h: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(h, (embed_dim,), norm_weight_2, norm_bias_2, eps)

    if norm_first:
        x = src + attention(ln1(src))
        return x + feed_forward(ln2(x))
    x = ln1(src + attention(src))
    return ln2(x + feed_forward(x))


@_register(aten._cdist_forward.default)
def cdist(x1: torch.Tensor, x2: torch.Tensor, p: float, compute_mode: Any = None) -> torch.Tensor:
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return torch.linalg.vector_norm(diff, ord=p, dim=-1)


@_register(aten._pdist_forward.default)
def pdist(x: torch.Tensor, p: float = 2.0) -> torch.Tensor:
    n = x.shape[0]
    i, j = torch.triu_indices(n, n, 1, device=x.device)
    return torch.linalg.vector_norm(x[i] - x[j], ord=p, dim=-1)


@_register(aten._scaled_dot_product_flash_attention_for_cpu.default)
def flash_attention_for_cpu(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            dropout_p: float = 0.0, is_causal: bool = False, *,
                            attn_mask: torch.Tensor | None = None,
                            scale: float | None = None) -> Any:
    """Math attention when nothing is drawn; with dropout the kernel's own draws cannot be
    reproduced, so the op stays (and random_ops refuses it)."""
    if dropout_p != 0.0:
        return NotImplemented
    from torch._decomp import decomposition_table as torch_table

    fn = torch_table[aten._scaled_dot_product_flash_attention_for_cpu.default]
    return fn(query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)
