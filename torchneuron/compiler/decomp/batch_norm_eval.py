"""BatchNorm in eval mode (running statistics) as eager's CPU kernel computes it.

ATen's CPU batch norm does not evaluate ``(x - mean) / sqrt(var + eps) * weight + bias``:
for a contiguous (or channels-last) input it first folds each channel's statistics into a
linear term and a constant, in the input's opmath type (float32 for float16/bfloat16)::

    invstd = 1 / sqrt(running_var + eps)
    alpha  = invstd * weight
    beta   = bias - running_mean * alpha
    out    = x * alpha + beta

PyTorch's decomposition, which the lowering used, computes ``((x - mean) * invstd) *
weight + bias``. The two round differently (float16 was off by several ulps), and they
disagree at degenerate statistics: with ``running_var + eps == 0`` eager gives ``alpha =
inf`` and ``x * inf + (-inf)``, NaN for half the elements, where the decomposition gave
+-inf everywhere. Eval-mode BatchNorm is every inference and validation pass of a CNN.

Eager's vectorized ``x * alpha + beta`` is compiled to a fused multiply-add. For
float16/bfloat16 it is reproduced exactly (through float64); float32 and float64 keep a
separate multiply and add, a last-bit difference on some elements (within the float32
tolerance, as for ``addcmul`` in decomp/addc.py), not worth float64 arithmetic over a
whole activation.

Training mode keeps the entry it had (the batch statistics and running-stat updates
are unchanged), and so does an input in neither layout, for which eager runs another
kernel, ``((x - mean) * invstd) * weight + bias`` elementwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.host_numerics import (
    refuse_unless_premise,
    register_premise,
    sample,
)

__all__ = ["batch_norm_eval_decompositions"]

aten = torch.ops.aten
_HALVES = (torch.float16, torch.bfloat16)
# op -> (position of ``training`` or None when the op is eval-only, result count)
_OPS: dict[Any, tuple[int | None, int]] = {
    aten._native_batch_norm_legit_no_training.default: (None, 3),
    aten._native_batch_norm_legit.default: (5, 3),
    aten._native_batch_norm_legit_functional.default: (5, 5),
    aten.native_batch_norm.default: (5, 3),
}


def _eval_layout(x: torch.Tensor) -> bool:
    """Whether eager takes its folded (alpha, beta) kernel for ``x``."""
    if x.dim() < 2 or not x.is_floating_point():
        return False
    if x.is_contiguous():
        return True
    return x.dim() in (4, 5) and x.is_contiguous(
        memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)


def batch_norm_eval(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                    running_mean: torch.Tensor, running_var: torch.Tensor,
                    eps: float) -> torch.Tensor:
    """Eager's eval-mode output: ``x * alpha + beta`` with the per-channel terms in opmath."""
    opmath = torch.float32 if x.dtype in _HALVES else x.dtype
    invstd = 1 / torch.sqrt(running_var.to(opmath) + eps)
    alpha = invstd * weight.to(opmath) if weight is not None else invstd
    prod = running_mean.to(opmath) * alpha
    beta = bias.to(opmath) - prod if bias is not None else 0 - prod
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    alpha, beta = alpha.reshape(shape), beta.reshape(shape)
    if opmath != x.dtype:
        # eager's float32 fused multiply-add: the product is exact in float64 and the sum
        # rounded there, then to float32 (equal to the fused result but for rare
        # double-rounding ties: none in 131,072 elements per half type, where a float32
        # multiply and add differed on 1 element in 3000 to 6000)
        wide = x.to(torch.float64) * alpha.to(torch.float64) + beta.to(torch.float64)
        return wide.to(torch.float32).to(x.dtype)
    return x * alpha + beta


def _premise(dtype: torch.dtype) -> tuple[Any, Any]:
    """(eager, ours) on one sample: whether this CPU's eager takes the fused multiply-add
    ``batch_norm_eval`` reproduces for half types (``host_numerics``)."""
    def inputs() -> list[torch.Tensor]:
        x = sample((16, 8, 7, 7), 0, 4.0).to(dtype)
        m, w, b = (sample((8,), s).to(dtype) for s in (1, 2, 3))
        v = (sample((8,), 4).abs() * 3).to(dtype)
        return [x, w, b, m, v]

    def eager() -> torch.Tensor:
        x, w, b, m, v = inputs()
        return torch.native_batch_norm(x, w, b, m, v, False, 0.1, 1e-5)[0]

    def ours() -> torch.Tensor:
        x, w, b, m, v = inputs()
        return batch_norm_eval(x, w, b, m, v, 1e-5)

    return eager, ours


for _dtype in _HALVES:
    register_premise("aten.native_batch_norm(eval)", _dtype, *_premise(_dtype))


def _wrap(op: Any, base: Callable[..., Any] | None) -> Callable[..., Any]:
    training_at, results = _OPS[op]

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        x, weight, bias, running_mean, running_var = args[:5]
        training = False if training_at is None else args[training_at]
        eps = args[-1]
        if training or running_mean is None or running_var is None or kwargs \
                or not _eval_layout(x):
            return base(*args, **kwargs) if base is not None else NotImplemented
        if x.dtype in _HALVES \
                and not refuse_unless_premise("aten.native_batch_norm(eval)", x.dtype):
            return NotImplemented
        out = batch_norm_eval(x, weight, bias, running_mean, running_var, eps)
        empty = x.new_zeros((0,))
        if results == 3:
            return out, empty, empty
        return out, empty, empty, running_mean.clone(), running_var.clone()

    return decomposition


def batch_norm_eval_decompositions(base: dict[Any, Callable[..., Any]]
                                   ) -> dict[Any, Callable[..., Any]]:
    """Entries wrapping ``base``'s (the table built so far): training mode and other
    layouts keep ``base``'s entry."""
    return {op: _wrap(op, base.get(op)) for op in _OPS}
