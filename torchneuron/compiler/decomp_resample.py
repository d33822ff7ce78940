"""Antialiased bilinear resizing (``F.interpolate(..., antialias=True)``) as two matmuls.

``_upsample_bilinear2d_aa`` has no lowering. ATen's kernel is separable: each output row
(column) is a normalised triangle-filter average of a window of input rows (columns),
whose weights depend on the sizes and scale only. Those weights are computed here while
tracing, exactly as ATen's ``_compute_weights_aa`` does (window centre, support widened
by the scale when downsampling, weights divided by their sum), and applied as constant
matrices: ``W_h @ x @ W_w^T``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from torchneuron.compiler.decomp_registry import registrar

__all__ = ["RESAMPLE_DECOMPOSITIONS"]

aten = torch.ops.aten
RESAMPLE_DECOMPOSITIONS: dict[Any, Any] = {}
_register = registrar(RESAMPLE_DECOMPOSITIONS)


def _scale(in_size: int, out_size: int, align_corners: bool, scale: float | None) -> float:
    """ATen's area_pixel_compute_scale: input pixels per output pixel."""
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if scale is not None and scale > 0:
        return 1.0 / scale
    return in_size / out_size


def _weights(in_size: int, out_size: int, align_corners: bool, scale: float | None
             ) -> list[list[float]]:
    """The [out_size, in_size] matrix of ATen's antialiased bilinear weights."""
    s = _scale(in_size, out_size, align_corners, scale)
    support = s if s >= 1.0 else 1.0  # interp_size / 2 = 1, widened by the scale
    invscale = 1.0 / s if s >= 1.0 else 1.0
    rows = []
    for i in range(out_size):
        center = s * (i + 0.5)
        xmin = max(int(center - support + 0.5), 0)
        xsize = min(int(center + support + 0.5), in_size) - xmin
        w = [max(0.0, 1.0 - abs((j + xmin - center + 0.5) * invscale)) for j in range(xsize)]
        total = math.fsum(w)
        row = [0.0] * in_size
        for j, v in enumerate(w):
            row[xmin + j] = v / total if total != 0.0 else v
        rows.append(row)
    return rows


def _resize(x: torch.Tensor, out_hw: Sequence[int], align_corners: bool,
            scales: Sequence[float | None]) -> torch.Tensor:
    (ih, iw), (oh, ow) = x.shape[-2:], out_hw
    wh = torch.tensor(_weights(ih, oh, align_corners, scales[0]), dtype=x.dtype, device=x.device)
    ww = torch.tensor(_weights(iw, ow, align_corners, scales[1]), dtype=x.dtype, device=x.device)
    return torch.matmul(wh, torch.matmul(x, ww.t()))


@_register(aten._upsample_bilinear2d_aa.default)
def upsample_bilinear2d_aa(x: torch.Tensor, output_size: Sequence[int], align_corners: bool,
                           scales_h: float | None = None, scales_w: float | None = None
                           ) -> torch.Tensor:
    return _resize(x, list(output_size), align_corners, (scales_h, scales_w))


@_register(aten._upsample_bilinear2d_aa.vec)
def upsample_bilinear2d_aa_vec(x: torch.Tensor, output_size: Sequence[int] | None,
                               align_corners: bool, scale_factors: Sequence[float] | None
                               ) -> torch.Tensor:
    """Sizes from the scale factors as ATen computes them (floor of size * factor)."""
    if output_size is not None:
        return _resize(x, list(output_size), align_corners, (None, None))
    assert scale_factors is not None
    out = [int(n * f) for n, f in zip(x.shape[-2:], scale_factors, strict=True)]
    return _resize(x, out, align_corners, list(scale_factors))
