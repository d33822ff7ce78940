"""The decomposition table used by `prepare`: core aten + Torch-MLIR's + our own entries.

Our own entries exist because this torch-mlir cannot lower some ops that real training
graphs contain (max_pool2d_with_indices and its backward, empty_permuted from dropout,
hypot, ...), or lowers them in a way that crashed it (logsumexp). Random ops are never
decomposed here: `random_ops` lifts them out of the graph so eager's own kernel draws
them (a decomposition into rand + arithmetic would draw different numbers), with one
exception, native_dropout, which becomes `bernoulli.p` + arithmetic in the exact order of
ATen's CPU kernel so the numbers stay bitwise equal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._decomp import core_aten_decompositions

__all__ = ["decomposition_table", "OWN_DECOMPOSITIONS"]

aten = torch.ops.aten
OWN_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}


def _register(*ops: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        for op in ops:
            OWN_DECOMPOSITIONS[op] = fn
        return fn

    return wrap


def _is_random(op: Any) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(op, "tags", ())


# Random composites that *do* need decomposing into primitive random ops.
_RANDOM_COMPOSITES_KEPT = {"rrelu", "lstm", "gru", "rnn_tanh", "rnn_relu",
                           "scaled_dot_product_attention", "native_dropout"}


def decomposition_table() -> dict[Any, Callable[..., Any]]:
    """Core aten decompositions + `torch_mlir.fx.get_decomposition_table()` + ours."""
    import torch_mlir.fx as tmfx

    table: dict[Any, Callable[..., Any]] = dict(core_aten_decompositions())
    table.update(tmfx.get_decomposition_table())
    for op in list(table):
        name = getattr(op, "__name__", str(op)).split(".")[0]
        if _is_random(op) and name not in _RANDOM_COMPOSITES_KEPT:
            del table[op]  # keep primitive random ops intact for random_ops
    table.update(OWN_DECOMPOSITIONS)
    return table


# --------------------------------------------------------------------------- random


@_register(aten.native_dropout.default)
def native_dropout(x: torch.Tensor, p: float, train: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    """ATen CPU: mask = empty_like(x).bernoulli_(1-p); out = x.mul(mask).mul_(scale)."""
    if train is False or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    p1m = 1.0 - p
    scale = 0.0 if p1m == 0 else 1.0 / p1m
    mask = aten.bernoulli.p(torch.empty_like(x, memory_format=torch.contiguous_format), p1m)
    out = x * mask * scale
    return out, mask.to(torch.bool)


@_register(aten.empty_permuted.default)
def empty_permuted(size: Sequence[int], physical_layout: Sequence[int], **kwargs: Any) -> torch.Tensor:
    """Values are unspecified, so the layout does not matter in a functional graph."""
    return torch.empty(list(size), **{k: v for k, v in kwargs.items() if v is not None})


# --------------------------------------------------------------------------- pooling


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1  # the last window must start inside the input or the left padding
    return out


def _pair(v: Sequence[int] | int, default: Sequence[int] | None = None) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = list(v) or list(default or [])
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _windows(x: torch.Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
             ceil_mode: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack the kh*kw strided views of the padded input: (N, C, K, oh, ow) values and the
    flat input index (K, oh, ow) each one reads, without any gather or window op."""
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride, (kh, kw))
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    h, w = x.shape[-2], x.shape[-1]
    oh = _pool_out(h, kh, sh, ph, dh, ceil_mode)
    ow = _pool_out(w, kw, sw, pw, dw, ceil_mode)
    need_h = (oh - 1) * sh + (kh - 1) * dh + 1
    need_w = (ow - 1) * sw + (kw - 1) * dw + 1
    low = -math.inf if x.dtype.is_floating_point else torch.iinfo(x.dtype).min
    xp = aten.constant_pad_nd(x, [pw, max(0, need_w - w - pw), ph, max(0, need_h - h - ph)], low)
    vals, idxs = [], []
    rows = torch.arange(oh, device=x.device) * sh - ph
    cols = torch.arange(ow, device=x.device) * sw - pw
    for i in range(kh):
        for j in range(kw):
            v = xp[..., i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw]
            vals.append(v)
            idxs.append((rows + i * dh)[:, None] * w + (cols + j * dw)[None, :])
    return torch.stack(vals, dim=-3), torch.stack(idxs, dim=0)


@_register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Max over the stacked windows; index = flat h*W+w of the first maximum (ATen's)."""
    vals, idxs = _windows(x, kernel_size, stride, padding, dilation, ceil_mode)
    out, arg = torch.max(vals, dim=-3)
    k, oh, ow = idxs.shape
    flat = idxs.reshape(k, oh * ow)
    index = torch.gather(flat.expand(*arg.shape[:-2], k, oh * ow), -2,
                         arg.reshape(*arg.shape[:-2], 1, oh * ow))
    return out, index.reshape(arg.shape)


@_register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad: torch.Tensor, x: torch.Tensor, kernel_size: Any,
                                     stride: Any, padding: Any, dilation: Any, ceil_mode: bool,
                                     indices: torch.Tensor) -> torch.Tensor:
    """Scatter-add each output gradient onto the input element its index names."""
    h, w = x.shape[-2], x.shape[-1]
    lead = x.shape[:-2]
    g = grad.reshape(*lead, -1)
    idx = indices.reshape(*lead, -1)
    zeros = torch.zeros(*lead, h * w, dtype=grad.dtype, device=grad.device)
    return torch.scatter_add(zeros, -1, idx, g).reshape(x.shape)


# --------------------------------------------------------------------------- math


@_register(aten.hypot.default)
def hypot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(a * a + b * b)


@_register(aten.logsumexp.default)
def logsumexp(x: torch.Tensor, dim: Sequence[int], keepdim: bool = False) -> torch.Tensor:
    """Stable form; the max is taken as 0 where it is infinite (all -inf rows give -inf)."""
    if not x.dtype.is_floating_point:
        x = x.to(torch.get_default_dtype())
    dims = list(dim) if len(dim) else list(range(x.dim()))
    if x.dim() == 0:
        return x.clone()
    m = torch.amax(x, dims, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    out = torch.log(torch.sum(torch.exp(x - m), dims, keepdim=True)) + m
    return out if keepdim else out.squeeze(dims)
