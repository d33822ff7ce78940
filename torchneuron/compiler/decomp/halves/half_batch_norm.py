"""float16 BatchNorm in training mode as eager's CPU kernel computes it.

With float16 input and float16 (or no) affine parameters, ATen's CPU batch norm keeps
its per-channel statistics in the parameter type: the batch mean and ``1 / sqrt(var +
eps)`` are rounded to float16 (they are also the ``save_mean`` / ``save_invstd``
results), then folded into ``alpha = invstd * weight`` and ``beta = bias - mean * alpha``
in float32, and the output is the fused multiply-add ``x * alpha + beta`` rounded to
float16. PyTorch's decomposition normalized with the unrounded float32 statistics: a
quarter of the outputs differed from eager, some by 3 ulps (found by
tools/special_sweep.py on batch_norm and instance_norm). This reproduces eager bit for
bit on the checked shapes (the statistics in float64, the fused multiply-add through
float64). bfloat16 follows another path in eager that this does not reproduce; it and
every other dtype, layout or mixed-parameter case keep their entries.
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

__all__ = ["half_batch_norm_decompositions"]

aten = torch.ops.aten
# op -> number of results (all take input, weight, bias, running_mean, running_var,
# training, momentum, eps)
_OPS: dict[Any, int] = {
    aten._native_batch_norm_legit.default: 3,
    aten._native_batch_norm_legit.no_stats: 3,  # (input, weight, bias, training, ...)
    aten._native_batch_norm_legit_functional.default: 5,
    aten.native_batch_norm.default: 3,
}


def _applies(x: torch.Tensor, *params: torch.Tensor | None) -> bool:
    return x.dtype == torch.float16 and x.dim() >= 2 and x.is_contiguous() \
        and all(p is None or p.dtype == torch.float16 for p in params)


def _forward(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
             eps: float) -> tuple[torch.Tensor, ...]:
    """(output, save_mean, save_invstd, batch mean and biased variance in float64)."""
    dims = [0, *range(2, x.dim())]
    wide = x.to(torch.float64)
    mean = wide.mean(dims)
    var = (wide - mean.reshape([1, -1] + [1] * (x.dim() - 2))).square().mean(dims)
    mean_h = mean.to(torch.float32).to(x.dtype)
    invstd_h = (1 / torch.sqrt(var + eps)).to(torch.float32).to(x.dtype)
    alpha = invstd_h.to(torch.float32)
    if weight is not None:
        alpha = alpha * weight.to(torch.float32)
    prod = mean_h.to(torch.float32) * alpha
    beta = bias.to(torch.float32) - prod if bias is not None else 0 - prod
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    out = wide * alpha.reshape(shape).to(torch.float64) \
        + beta.reshape(shape).to(torch.float64)
    return out.to(torch.float32).to(x.dtype), mean_h, invstd_h, mean, var


def _sample() -> tuple[torch.Tensor, ...]:
    x = sample((16, 8, 7, 7), 0, 4.0).to(torch.float16)
    w, b = sample((8,), 1).to(torch.float16), sample((8,), 2).to(torch.float16)
    return x, w, b


def _eager_sample() -> tuple[torch.Tensor, ...]:
    x, w, b = _sample()
    return torch.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)


def _our_sample() -> tuple[torch.Tensor, ...]:
    x, w, b = _sample()
    return _forward(x, w, b, 1e-5)[:3]


# this CPU's eager takes the loop ``_forward`` reproduces (its fused multiply-add), or the
# graph is refused (``host_numerics``)
register_premise("aten.native_batch_norm", torch.float16, _eager_sample, _our_sample)


def _running(old: torch.Tensor, batch: torch.Tensor, momentum: float) -> torch.Tensor:
    return (batch * momentum + old.to(torch.float64) * (1 - momentum)).to(old.dtype)


def _wrap(op: Any, base: Callable[..., Any] | None) -> Callable[..., Any]:
    results = _OPS[op]

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        original = args
        if op is aten._native_batch_norm_legit.no_stats:
            args = (*args[:3], None, None, *args[3:])
        x, weight, bias, running_mean, running_var, training, momentum, eps = \
            (list(args) + [None] * 8)[:8]
        if kwargs or not training or not _applies(x, weight, bias, running_mean, running_var):
            return base(*original, **kwargs) if base is not None else NotImplemented
        if not refuse_unless_premise("aten.native_batch_norm", torch.float16):
            return NotImplemented
        out, mean_h, invstd_h, mean, var = _forward(x, weight, bias, eps)
        n = x.numel() // x.shape[1]
        new_mean = new_var = None
        if running_mean is not None:
            new_mean = _running(running_mean, mean, momentum)
        if running_var is not None:
            new_var = _running(running_var, var * (n / max(n - 1, 1)), momentum)
        if results == 5:
            return out, mean_h, invstd_h, new_mean, new_var
        if new_mean is not None:
            running_mean.copy_(new_mean)
        if new_var is not None:
            running_var.copy_(new_var)
        return out, mean_h, invstd_h

    return decomposition


def half_batch_norm_decompositions(base: dict[Any, Callable[..., Any]]
                                   ) -> dict[Any, Callable[..., Any]]:
    """Entries wrapping ``base``'s (the table built so far): everything but contiguous
    float16 training keeps ``base``'s entry."""
    return {op: _wrap(op, base.get(op)) for op in _OPS}
