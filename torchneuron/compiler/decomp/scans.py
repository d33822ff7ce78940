"""``cumsum`` / ``cumprod`` / ``logcumsumexp`` accumulated in ATen's wider type.

ATen's CPU scan kernel (``cpu_cum_base_kernel``) carries the running value in
``acc_type``: float64 for float32 input, float32 for float16 / bfloat16, and rounds each
output once. The lowering scanned in the input's type, so float32 ``cumsum`` of
``[3.4e38, 5.8, ..., -3.4e38, ...]`` gave 10.3 where eager gives 0.0 (the large terms cancel
exactly in float64), ``cumprod`` overflowed to inf where eager's float64 product stays
finite, and float16 sums drifted by ulps. Here the scan runs in the accumulation type
(the existing lowerings, on converted input) and the result is rounded once: equal to
eager's sequential float64 scan after rounding to float32 (the two float64 results differ
far below float32's last bit). float64 and integer scans are unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["CUMULATIVE_DECOMPOSITIONS"]

aten = torch.ops.aten
CUMULATIVE_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(CUMULATIVE_DECOMPOSITIONS)
_ACC = {torch.float32: torch.float64, torch.float16: torch.float32,
        torch.bfloat16: torch.float32}


def _acc(x: torch.Tensor, dtype: torch.dtype | None) -> tuple[torch.dtype, torch.dtype] | None:
    """(output dtype, accumulation dtype) when eager accumulates wider, else None."""
    out = dtype if dtype is not None else x.dtype
    if out not in _ACC or not (x.is_floating_point() or dtype is not None):
        return None
    return out, _ACC[out]


@_register(aten.cumsum.default)
def cumsum(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> Any:
    got = _acc(x, dtype)
    if got is None:
        return NotImplemented
    out, acc = got
    return aten.cumsum.default(x.to(out).to(acc), dim).to(out)


@_register(aten.cumprod.default)
def cumprod(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> Any:
    got = _acc(x, dtype)
    if got is None:
        return _scan_cumprod(x, dim, dtype)
    out, acc = got
    return _scan_cumprod(x.to(out).to(acc), dim).to(out)


@_register(aten.logcumsumexp.default)
def logcumsumexp(x: torch.Tensor, dim: int) -> Any:
    got = _acc(x, None)
    if got is None:
        return _scan_logcumsumexp(x, dim)
    out, acc = got
    return _scan_logcumsumexp(x.to(acc), dim).to(out)


def _scan_cumprod(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Log-depth scan (Hillis-Steele): ceil(log2 n) shifted multiplies, no loop op."""
    y = (x.to(dtype) if dtype is not None else x).movedim(dim, -1) if x.dim() else x
    if x.dim() == 0:
        return y.clone()
    n, k = y.shape[-1], 1
    while k < n:
        y = y * aten.constant_pad_nd(y[..., : n - k], [k, 0], 1.0)
        k *= 2
    return y.movedim(-1, dim)


def _logaddexp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m = torch.maximum(a, b)
    out = m + torch.log1p(torch.exp(-torch.abs(a - b)))
    return torch.where(torch.isinf(m) & (a == b), a, out)  # -inf/-inf, inf/inf


def _scan_logcumsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Log-depth scan of logaddexp: exact running max, so tiny early terms never underflow
    to -inf and large ones never overflow (torch-mlir's log(cumsum(exp)) does both)."""
    if x.dim() == 0:
        return x.clone()
    y = x.movedim(dim, -1)
    n, k = y.shape[-1], 1
    while k < n:
        y = _logaddexp(y, aten.constant_pad_nd(y[..., : n - k], [k, 0], -math.inf))
        k *= 2
    return y.movedim(-1, dim)


def _cum_extreme(x: torch.Tensor, dim: int, larger: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """O(n^2) masked reduction; index = last position of the running extreme (ATen's >=),
    value = the element there (ATen's, bit for bit)."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    y = x.movedim(dim, -1)
    n = y.shape[-1]
    pos = torch.arange(n, device=x.device)
    keep = pos[None, :] <= pos[:, None]  # [i, j]: j <= i
    if x.dtype.is_floating_point:
        fill = -math.inf if larger else math.inf
    else:  # in x's dtype: a Python float fill made int64 compare in float (2**62 + 1 == 2**62)
        fill = torch.iinfo(x.dtype).min if larger else torch.iinfo(x.dtype).max
    a = torch.where(keep, y.unsqueeze(-2), torch.full((), fill, dtype=x.dtype, device=x.device))
    vals = a.amax(-1) if larger else a.amin(-1)
    hit = keep & ((a == vals.unsqueeze(-1)) | torch.isnan(a))
    idx = torch.where(hit, pos, -1).amax(-1)
    vals = torch.gather(y, -1, idx)  # the element at the index: a later 0.0 after -0.0, NaN
    return vals.movedim(-1, dim), idx.movedim(-1, dim)


_register(aten.cummax.default)(lambda x, dim: _cum_extreme(x, dim, True))


_register(aten.cummin.default)(lambda x, dim: _cum_extreme(x, dim, False))
