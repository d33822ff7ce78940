"""``fractional_max_pool2d/3d`` (and their backwards) as gathers, in ATen's exact order.

This torch-mlir has no lowering for fractional max pooling, so FractionalMaxPool2d/3d
graphs ran eagerly. The aten op is deterministic: its random offsets arrive as the
``random_samples`` tensor (drawn by ``torch.rand`` in ``F.fractional_max_pool*d``, which
``random_ops`` leaves to eager's generator). ATen's CPU kernel, reproduced here:

- window starts per spatial dim from that plane's sample ``u``:
  ``alpha = float(in - pool) / float(out - 1)``,
  ``start[i] = int((i + u) * alpha) - int(u * alpha)`` for ``i < out - 1`` and
  ``start[out - 1] = in - pool``, all in the input's float type (as the kernel computes);
  the sample index is W, H for 2d and T, H, W for 3d;
- each window's maximum scans row-major and takes ``val > max or isnan(val)``: the first
  maximum, or the last NaN; the index is the flat position in the input plane;
- the backward adds each output gradient onto its index (``scatter_add``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["FRACTIONAL_DECOMPOSITIONS"]

aten = torch.ops.aten


def _starts(u: torch.Tensor, size: int, out: int, pool: int) -> torch.Tensor:
    """(N, C) samples -> (N, C, out) int64 window starts, as ATen's generate_intervals."""
    last = torch.full((*u.shape, 1), size - pool, dtype=torch.int64, device=u.device)
    if out <= 1:
        return last[..., :out]
    # torch.full, not torch.tensor: AOTAutograd needs a functional graph (no detach_)
    alpha = torch.full((), float(size - pool), dtype=u.dtype, device=u.device) / float(out - 1)
    i = torch.arange(out - 1, device=u.device).to(u.dtype)
    first = ((i + u.unsqueeze(-1)) * alpha).to(torch.int64) - (u * alpha).to(torch.int64).unsqueeze(-1)
    return torch.cat([first, last], dim=-1)


def _pool(x: torch.Tensor, kernel_size: Sequence[int], output_size: Sequence[int],
          samples: torch.Tensor, order: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    nd = len(kernel_size)
    unbatched = x.dim() == nd + 1
    if unbatched:
        x = x.unsqueeze(0)
    n, c, space = x.shape[0], x.shape[1], list(x.shape[2:])
    # ATen's kernel reads row b of the samples for batch b: extra rows (a module built with
    # batched samples, called on an unbatched input) are never read
    samples = samples[:n]
    flat_idx: torch.Tensor | None = None
    for d in range(nd):
        starts = _starts(samples[..., order[d]], space[d], output_size[d], kernel_size[d])
        pos = starts.unsqueeze(-1) + torch.arange(kernel_size[d], device=x.device)  # (N,C,o,k)
        stride = 1
        for s in space[d + 1:]:
            stride *= s
        pos = pos * stride
        if flat_idx is None:
            flat_idx = pos
        else:  # (N,C,o_0..o_{d-1},k_0..k_{d-1}) + (N,C,o_d,k_d): interleave the new dims
            a = flat_idx.reshape(n, c, *flat_idx.shape[2:2 + d], 1, *flat_idx.shape[2 + d:], 1)
            b = pos.reshape(n, c, *([1] * d), output_size[d], *([1] * d), kernel_size[d])
            flat_idx = a + b
    assert flat_idx is not None
    outs, ks = list(output_size), list(kernel_size)
    window, cells, plane = 1, 1, 1
    for k in ks:
        window *= k
    for o in outs:
        cells *= o
    for s in space:
        plane *= s
    flat_idx = flat_idx.reshape(n, c, cells, window)  # row-major windows (sizes explicit:
    # -1 is ambiguous for an empty batch)
    vals = torch.gather(x.reshape(n, c, plane), 2, flat_idx.reshape(n, c, cells * window))
    vals = vals.reshape(flat_idx.shape)
    nan = torch.isnan(vals)
    ar = torch.arange(window, device=x.device)
    last_nan = torch.where(nan, ar, -1).amax(-1, keepdim=True)
    first_max = torch.where(nan, float("-inf"), vals).argmax(-1, keepdim=True)
    k = torch.where(last_nan >= 0, last_nan, first_max)
    out = torch.gather(vals, -1, k).reshape(n, c, *outs)
    idx = torch.gather(flat_idx, -1, k).reshape(n, c, *outs)
    return (out.squeeze(0), idx.squeeze(0)) if unbatched else (out, idx)


def fractional_max_pool2d(x: torch.Tensor, kernel_size: Sequence[int], output_size: Sequence[int],
                          random_samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _pool(x, kernel_size, output_size, random_samples, order=(1, 0))


def fractional_max_pool3d(x: torch.Tensor, kernel_size: Sequence[int], output_size: Sequence[int],
                          random_samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _pool(x, kernel_size, output_size, random_samples, order=(0, 1, 2))


def _backward(grad: torch.Tensor, x: torch.Tensor, kernel_size: Any, output_size: Any,
              indices: torch.Tensor) -> torch.Tensor:
    nd = len(kernel_size)
    lead = x.shape[: x.dim() - nd]
    plane, cells = 1, 1
    for s in x.shape[x.dim() - nd:]:
        plane *= s
    for s in grad.shape[grad.dim() - nd:]:
        cells *= s
    planes = x.reshape(*lead, plane)
    flat = torch.zeros_like(planes).scatter_add(-1, indices.reshape(*lead, cells),
                                                grad.reshape(*lead, cells))
    return flat.reshape(x.shape)


FRACTIONAL_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    aten.fractional_max_pool2d.default: fractional_max_pool2d,
    aten.fractional_max_pool3d.default: fractional_max_pool3d,
    aten.fractional_max_pool2d_backward.default: _backward,
    aten.fractional_max_pool3d_backward.default: _backward,
}
