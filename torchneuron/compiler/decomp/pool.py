"""Pooling gradients and adaptive pooling, as ops Torch-MLIR lowers.

This torch-mlir lowers the forward pooling ops it knows but none of their backward
ops (``avg_pool2d/3d_backward``, ``max_pool3d_with_indices_backward``,
``_adaptive_avg_pool2d/3d_backward``, ``adaptive_max_pool1d/2d/3d`` and their
backward), so every training graph with pooling ran eagerly. Each decomposition
below computes what ATen's CPU kernel computes:

- average pooling gradient: each output gradient divided by its window's divisor
  (ATen's rule: the window clipped to the padded input when padding counts, to the
  input when not, or ``divisor_override``), then spread over its window by a
  transposed convolution with a kernel of ones (one channel, so any batch/channel
  layout works), cut back to the input;
- max pooling gradients: each output gradient added onto the input element its
  index names (``scatter_add`` on the flattened spatial dims);
- adaptive average pooling: windows ``[floor(i*L/O), ceil((i+1)*L/O))`` per dim are a
  box, so the average over the box is a product of per-dim averages: one small
  matrix per dim (its transpose for the gradient);
- adaptive max pooling: the values of each box gathered in ATen's scan order
  (row-major), padded with -inf, the first maximum taken, and its flat input index
  (or the box's last NaN, found by a second max over NaN positions).

Sums run in other orders than ATen's loops: values agree to fp32 rounding. Maxima
and indices are exact: a box holding a NaN reports its last NaN (value and index), as
ATen's scan does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchneuron.compiler.decomp.extremes import nan_blind_max
from torchneuron.compiler.decomp.registry import registrar
from torchneuron.compiler.errors import PrepareError

__all__ = ["POOL_DECOMPOSITIONS"]

aten = torch.ops.aten


def _expand(v: Sequence[int] | int, n: int, default: Sequence[int] | None = None) -> list[int]:
    v = [v] if isinstance(v, int) else list(v)
    if not v:
        v = list(default or [])
    return v * n if len(v) == 1 else v


def _window_count(size: int, out: int, k: int, s: int, p: int, include_pad: bool,
                  like: torch.Tensor) -> torch.Tensor:
    """ATen's divisor per output position along one dim (avg_pool2d/3d CPU kernels).

    Built from ``arange`` (no tensor constants: ``torch.tensor`` inside a decomposition
    leaves a mutating ``detach_`` in AOTAutograd's graph)."""
    start = torch.arange(out, device=like.device) * s - p
    end = torch.clamp(start + k, max=size + p)
    if not include_pad:
        start, end = torch.clamp(start, min=0), torch.clamp(end, max=size)
    return (end - start).to(like.dtype)


def _avg_pool_backward(grad: torch.Tensor, x: torch.Tensor, kernel_size: Any, stride: Any,
                       padding: Any, ceil_mode: bool, count_include_pad: bool,
                       divisor_override: int | None, nd: int) -> torch.Tensor:
    k = _expand(kernel_size, nd)
    s = _expand(stride, nd, k)
    p = _expand(padding, nd)
    space = list(x.shape[-nd:])
    outs = list(grad.shape[-nd:])
    lead = list(x.shape[:-nd])
    if divisor_override:
        g = grad / divisor_override
    else:
        div = None
        for i in range(nd):
            vec = _window_count(space[i], outs[i], k[i], s[i], p[i], count_include_pad, grad)
            vec = vec.reshape([-1] + [1] * (nd - 1 - i))
            div = vec if div is None else div * vec
        g = grad / div
    g = g.reshape(-1, 1, *outs)
    ones = torch.ones([1, 1, *k], dtype=grad.dtype, device=grad.device)
    spread = aten.convolution.default(g, ones, None, s, [0] * nd, [1] * nd, True, [0] * nd, 1)
    # ``spread`` is in padded coordinates; cut [p, p + size), zero-filling what no window read.
    for i in range(nd):
        dim = 2 + i
        short = p[i] + space[i] - spread.shape[dim]
        if short > 0:
            pad = [0, 0] * (nd - 1 - i) + [0, short]
            spread = aten.constant_pad_nd.default(spread, pad, 0.0)
        spread = spread.narrow(dim, p[i], space[i])
    return spread.reshape(*lead, *space)


def avg_pool2d_backward(grad: torch.Tensor, x: torch.Tensor, kernel_size: Any, stride: Any,
                        padding: Any, ceil_mode: bool, count_include_pad: bool,
                        divisor_override: int | None = None) -> torch.Tensor:
    return _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override, 2)


def avg_pool3d_backward(grad: torch.Tensor, x: torch.Tensor, kernel_size: Any, stride: Any,
                        padding: Any, ceil_mode: bool, count_include_pad: bool,
                        divisor_override: int | None = None) -> torch.Tensor:
    return _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override, 3)


def _scatter_to_input(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor,
                      nd: int) -> torch.Tensor:
    """Add each output gradient onto the input element of its flat spatial index."""
    lead = list(x.shape[:-nd])
    numel = math.prod(x.shape[-nd:])
    g = grad.reshape(*lead, -1)
    idx = indices.reshape(*lead, -1)
    zeros = torch.zeros(*lead, numel, dtype=grad.dtype, device=grad.device)
    return torch.scatter_add(zeros, -1, idx, g).reshape(x.shape)


def max_pool3d_with_indices_backward(grad: torch.Tensor, x: torch.Tensor, kernel_size: Any,
                                     stride: Any, padding: Any, dilation: Any, ceil_mode: bool,
                                     indices: torch.Tensor) -> torch.Tensor:
    return _scatter_to_input(grad, x, indices, 3)


def _bounds(size: int, out: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Adaptive windows ``[floor(i*size/out), ceil((i+1)*size/out))`` for i < out."""
    i = torch.arange(out, device=device)
    lo = torch.div(i * size, out, rounding_mode="floor")
    hi = torch.div((i + 1) * size + out - 1, out, rounding_mode="floor")
    return lo, hi


def _max_window(size: int, out: int) -> int:
    return max(-(-((i + 1) * size) // out) - (i * size) // out for i in range(out))


def _average_matrix(size: int, out: int, like: torch.Tensor) -> torch.Tensor:
    """(size, out): column i averages window i of an adaptive pool."""
    lo, hi = _bounds(size, out, like.device)
    j = torch.arange(size, device=like.device).unsqueeze(1)
    inside = (j >= lo) & (j < hi)
    return inside.to(like.dtype) / (hi - lo).to(like.dtype)


_MAX_HALF_WINDOW = 64  # elements of a half-precision window summed one by one


def _adaptive_avg(x: torch.Tensor, output_size: Sequence[int], nd: int) -> torch.Tensor:
    """As ATen's CPU loop: each window's elements summed in order, then divided by the
    window's extent along each dim in turn. float16 / bfloat16 sum and divide in their own
    dtype there, rounding after every add, so they are summed one element at a time here
    (windows of up to 64 elements; larger ones are refused); float32 and float64 sum with
    ``sum`` (last-bit reassociation). An averaging matmul per dim had spread a NaN into
    every output (0 * NaN) and was off by an ulp in half precision."""
    half = x.dtype in (torch.float16, torch.bfloat16)
    window = math.prod(_max_window(x.shape[x.dim() - nd + i], o)
                       for i, o in enumerate(output_size))
    if half and window > _MAX_HALF_WINDOW:
        if torch._guards.TracingContext.try_get() is not None:
            return NotImplemented  # a raise escapes torch.compile; prepare refuses
        raise PrepareError(
            f"aten._adaptive_avg_pool{nd}d: eager sums {x.dtype} windows element by element in "
            f"{x.dtype}; windows of {window} elements (more than {_MAX_HALF_WINDOW}) are not "
            "unrolled, so this region runs eagerly.", op=f"aten._adaptive_avg_pool{nd}d",
            reason="adaptive-avg-half-window")
    out = x
    lead = x.dim() - nd
    counts = []
    for i, o in enumerate(output_size):
        dim = lead + i
        lo, hi = _bounds(x.shape[dim], o, x.device)
        k = _max_window(x.shape[dim], o)
        idx = lo.unsqueeze(1) + torch.arange(k, device=x.device)  # (o, k)
        inside = idx < hi.unsqueeze(1)
        idx = torch.where(inside, idx, lo.unsqueeze(1))
        out = torch.index_select(out, dim, idx.reshape(-1))
        out = out.reshape(*out.shape[:dim], o, k, *out.shape[dim + 1:]).movedim(dim + 1, -1)
        # windows trail: (..., o at dim, ..., k of earlier dims, k); mask padding slots
        mask = inside.reshape([1] * dim + [o] + [1] * (out.dim() - dim - 2) + [k])
        out = torch.where(mask, out.to(torch.float32), 0.0).to(x.dtype) if half \
            else torch.where(mask, out, 0.0)  # (exact: no bfloat16 literal, see below)
        counts.append(hi - lo)
    if half:
        flat = out.reshape(*out.shape[:out.dim() - nd], -1)
        total = (flat[..., 0].to(torch.float32) + 0.0).to(x.dtype)  # eager's sum starts at +0
        for j in range(1, flat.shape[-1]):
            total = total + flat[..., j]
    else:
        total = out.sum(dim=list(range(out.dim() - nd, out.dim())))
    for i, c in enumerate(counts):
        view = [1] * (lead + i) + [-1] + [1] * (nd - 1 - i)
        # (a half sum over a small integer: the quotient of the two as floats, rounded;
        # no half-precision constant, which this Torch-MLIR cannot hold for bfloat16)
        total = (total.to(torch.float32) / c.to(torch.float32).reshape(view)).to(x.dtype) \
            if half else total / c.to(x.dtype).reshape(view)
    return total


def _adaptive_avg_backward(grad: torch.Tensor, x: torch.Tensor, nd: int) -> torch.Tensor:
    g = grad
    for i in range(nd):
        dim = x.dim() - nd + i
        a = _average_matrix(x.shape[dim], grad.shape[dim], x)
        g = (g.movedim(dim, -1) @ a.t()).movedim(-1, dim)
    return g


def adaptive_avg_pool3d(x: torch.Tensor, output_size: Sequence[int]) -> torch.Tensor:
    return _adaptive_avg(x, _expand(output_size, 3), 3)


def adaptive_avg_pool2d_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return _adaptive_avg_backward(grad, x, 2)


def adaptive_avg_pool3d_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return _adaptive_avg_backward(grad, x, 3)


def _adaptive_max(x: torch.Tensor, output_size: Sequence[int], nd: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    space = list(x.shape[-nd:])
    outs = _expand(output_size, nd)
    lead = list(x.shape[:-nd])
    # flat[o1..ond, j1..jnd] = the flat input index window element j reads, row-major
    flat = torch.zeros([1] * (2 * nd), dtype=torch.int64, device=x.device)
    valid = torch.ones([1] * (2 * nd), dtype=torch.bool, device=x.device)
    stride = 1
    for i in reversed(range(nd)):
        lo, hi = _bounds(space[i], outs[i], x.device)
        j = torch.arange(_max_window(space[i], outs[i]), device=x.device)
        at = lo.unsqueeze(1) + j
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = at.shape
        flat = flat + torch.minimum(at, hi.unsqueeze(1) - 1).reshape(shape) * stride
        valid = valid & (at < hi.unsqueeze(1)).reshape(shape)
        stride *= space[i]
    k = math.prod(flat.shape[nd:])
    flat = flat.reshape(*outs, k)
    valid = valid.reshape(*outs, k)
    xs = x.reshape(*lead, -1).index_select(-1, flat.reshape(-1)).reshape(*lead, *outs, k)
    low = -math.inf if x.dtype.is_floating_point else torch.iinfo(x.dtype).min
    xs = torch.where(valid, xs, torch.full((), low, dtype=x.dtype, device=x.device))
    values, arg = nan_blind_max(xs, -1)
    flat = flat.expand(*lead, *outs, k)
    index = torch.gather(flat, -1, arg.unsqueeze(-1)).squeeze(-1)
    if not x.dtype.is_floating_point:
        return values, index
    # ATen takes a NaN over anything, the box's last one in scan order; the max above
    # never picks one: each box's last NaN position (a float max over exact integer
    # keys, -1 if none), its own value (bits) and flat index
    pos = torch.arange(k, device=x.device, dtype=torch.float32)
    key = torch.where(torch.isnan(xs) & valid, pos, torch.full_like(pos, -1.0))
    kmax, karg = nan_blind_max(key, -1)
    nan = kmax >= 0
    nan_value = torch.gather(xs, -1, karg.unsqueeze(-1)).squeeze(-1)
    nan_index = torch.gather(flat, -1, karg.unsqueeze(-1)).squeeze(-1)
    return torch.where(nan, nan_value, values), torch.where(nan, nan_index, index)


def adaptive_max_pool2d(x: torch.Tensor, output_size: Sequence[int]
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    return _adaptive_max(x, output_size, 2)


def adaptive_max_pool3d(x: torch.Tensor, output_size: Sequence[int]
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    return _adaptive_max(x, output_size, 3)


def adaptive_max_pool1d(x: torch.Tensor, output_size: Sequence[int]
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    return _adaptive_max(x, output_size, 1)


def adaptive_max_pool2d_backward(grad: torch.Tensor, x: torch.Tensor,
                                 indices: torch.Tensor) -> torch.Tensor:
    return _scatter_to_input(grad, x, indices, 2)


def adaptive_max_pool3d_backward(grad: torch.Tensor, x: torch.Tensor,
                                 indices: torch.Tensor) -> torch.Tensor:
    return _scatter_to_input(grad, x, indices, 3)


POOL_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    aten.avg_pool2d_backward.default: avg_pool2d_backward,
    aten.avg_pool3d_backward.default: avg_pool3d_backward,
    aten.max_pool3d_with_indices_backward.default: max_pool3d_with_indices_backward,
    aten._adaptive_avg_pool3d.default: adaptive_avg_pool3d,
    aten._adaptive_avg_pool2d_backward.default: adaptive_avg_pool2d_backward,
    aten._adaptive_avg_pool3d_backward.default: adaptive_avg_pool3d_backward,
    aten.adaptive_max_pool1d.default: adaptive_max_pool1d,
    aten.adaptive_max_pool2d.default: adaptive_max_pool2d,
    aten.adaptive_max_pool3d.default: adaptive_max_pool3d,
    aten.adaptive_max_pool2d_backward.default: adaptive_max_pool2d_backward,
    aten.adaptive_max_pool3d_backward.default: adaptive_max_pool3d_backward,
}


_register = registrar(POOL_DECOMPOSITIONS)  # (the entries below; those above are listed)


def _triple(v: Any, default: Any = None) -> tuple[int, int, int]:
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        v = default
    if isinstance(v, int):
        return (v, v, v)
    v = list(v)
    return (v[0], v[0], v[0]) if len(v) == 1 else (v[0], v[1], v[2])


def _pool_out(size: int, k: int, s: int, p: int, ceil: bool) -> int:
    out = (size + 2 * p - k + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1  # the last window must start inside the input or the left padding
    return out


@_register(aten.avg_pool3d.default)
def avg_pool3d(x: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Any:
    """Window sums (a ones-kernel convolution over the padded input, ceil-mode overhang
    padded with zeros) divided by ``divisor_override``, or by ATen's count: the same
    convolution over ones, with the padding counted only under ``count_include_pad`` and
    the overhang never. Used where the lowering is wrong (it ignores the override) or
    fails (a ceil-mode window that adds an output); otherwise the op is kept."""
    k = _triple(kernel_size)
    s = _triple(stride, k)
    p = _triple(padding, 0)
    spatial = x.shape[-3:]
    outs = [_pool_out(n, kk, ss, pp, ceil_mode) for n, kk, ss, pp in zip(spatial, k, s, p, strict=True)]
    floors = [_pool_out(n, kk, ss, pp, False) for n, kk, ss, pp in zip(spatial, k, s, p, strict=True)]
    if not divisor_override and outs == floors:
        return NotImplemented
    extra = [max(0, (o - 1) * ss + kk - n - 2 * pp)
             for o, ss, kk, n, pp in zip(outs, s, k, spatial, p, strict=True)]
    ones = torch.ones((1, 1, *k), dtype=x.dtype, device=x.device)

    def window_sums(t: torch.Tensor, pad_value: float) -> torch.Tensor:
        padded = aten.constant_pad_nd(t, [p[2], p[2], p[1], p[1], p[0], p[0]], pad_value)
        padded = aten.constant_pad_nd(padded, [0, extra[2], 0, extra[1], 0, extra[0]], 0.0)
        out = torch.nn.functional.conv3d(padded, ones, stride=s)
        return out[..., : outs[0], : outs[1], : outs[2]]

    sums = window_sums(x.reshape(-1, 1, *spatial), 0.0)
    if divisor_override:
        div: Any = divisor_override
    else:
        div = window_sums(torch.ones((1, 1, *spatial), dtype=x.dtype, device=x.device),
                          1.0 if count_include_pad else 0.0)
    return (sums / div).reshape(*x.shape[:-3], *outs)
