"""Reductions without a lowering (or with a wrong one): logsumexp, any / all over
several dims, median and nanmedian of the whole tensor, histc."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["REDUCTION_DECOMPOSITIONS"]

aten = torch.ops.aten
REDUCTION_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(REDUCTION_DECOMPOSITIONS)


def _float(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())


@_register(aten.logsumexp.default)
def logsumexp(x: torch.Tensor, dim: Sequence[int], keepdim: bool = False) -> torch.Tensor:
    """Stable form; the max is taken as 0 where it is infinite (all -inf rows give -inf).
    Complex values keep the op (``refuse_complex`` refuses it): cast to float here, they
    lost their imaginary parts (the exact sweep's complex64 logsumexp gave a real number)."""
    if x.is_complex():
        return NotImplemented
    if not x.dtype.is_floating_point:
        x = x.to(torch.get_default_dtype())
    dims = list(dim) if len(dim) else list(range(x.dim()))
    if x.dim() == 0:
        return x.clone()
    m = torch.amax(x, dims, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    out = torch.log(torch.sum(torch.exp(x - m), dims, keepdim=True)) + m
    return out if keepdim else out.squeeze(dims)


def _bool_dims(single: Any, whole: Any, x: torch.Tensor, dim: Sequence[int] | None,
               keepdim: bool) -> Any:
    """any / all over several dims (no lowering): one single-dim reduction per dim, last
    dim first so the remaining dim numbers stay valid. ``None`` reduces every dim; an empty
    list none (elementwise != 0). uint8 stays uint8, as in ATen."""
    if x.dim() == 0:
        return NotImplemented
    if x.dtype == torch.uint8:
        return _bool_dims(single, whole, x != 0, dim, keepdim).to(torch.uint8)
    if dim is not None and len(dim) == 0:
        return x != 0
    if dim is None:
        out = whole(x)
        return out.reshape([1] * x.dim()) if keepdim else out
    out = x
    for d in sorted({d % x.dim() for d in dim}, reverse=True):
        out = single(out, d, keepdim)
    return out


def _uint8_as_bool(op: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """any / all of uint8 give uint8 0 / 1 in ATen; the lowering gave the max (any of
    [0, 3] was 3). Reduced as bool, then converted back."""
    if x.dtype != torch.uint8:
        return NotImplemented
    return op(x != 0, *args, **kwargs).to(torch.uint8)


# (all.default / all.dim keep PyTorch's own decomposition, which gets uint8 right)
for _bool_op in (aten.any.default, aten.any.dim):
    _register(_bool_op)(lambda x, *a, _op=_bool_op, **k: _uint8_as_bool(_op, x, *a, **k))


@_register(aten.any.dims)
def any_dims(x: torch.Tensor, dim: Sequence[int] | None = None, keepdim: bool = False) -> Any:
    return _bool_dims(aten.any.dim, aten.any.default, x, dim, keepdim)


@_register(aten.all.dims)
def all_dims(x: torch.Tensor, dim: Sequence[int] | None = None, keepdim: bool = False) -> Any:
    return _bool_dims(aten.all.dim, aten.all.default, x, dim, keepdim)


@_register(aten.median.default)
def median(x: torch.Tensor) -> torch.Tensor:
    flat = torch.sort(x.reshape(-1)).values
    mid = flat[(flat.numel() - 1) // 2]
    return torch.where(torch.isnan(x).any(), torch.full_like(mid, math.nan), mid)


@_register(aten.nanmedian.default)
def nanmedian(x: torch.Tensor) -> torch.Tensor:
    flat = torch.sort(x.reshape(-1)).values  # NaNs sort last
    count = (~torch.isnan(flat)).sum()
    idx = torch.clamp((count - 1) // 2, min=0).reshape(1)
    return torch.gather(flat, 0, idx).reshape(())


@_register(aten.histc.default)
def histc(x: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:
    flat = _float(x).reshape(-1)
    # torch.full, not torch.tensor: under AOTAutograd's trace torch.tensor leaves a
    # lift_fresh_copy + detach_ that fails its functional-graph check
    lo, hi = (flat.min(), flat.max()) if min == max else (
        torch.full((), float(min), dtype=flat.dtype, device=x.device),
        torch.full((), float(max), dtype=flat.dtype, device=x.device))
    if min == max:
        same = lo == hi
        lo, hi = torch.where(same, lo - 1, lo), torch.where(same, hi + 1, hi)
    b = torch.floor((flat - lo) * bins / (hi - lo)).to(torch.int64)
    b = torch.where(flat == hi, bins - 1, b)
    inside = (flat >= lo) & (flat <= hi)
    onehot = (b[:, None] == torch.arange(bins, device=x.device)[None, :]) & inside[:, None]
    return onehot.to(flat.dtype).sum(0)
