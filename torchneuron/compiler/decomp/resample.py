"""Resampling ops without a lowering: 3-D grid sampling; antialiased bilinear resize refused.

``_upsample_bilinear2d_aa`` is refused (reason ``upsample-antialias``): eager's own bits
differ between ``ATEN_CPU_CAPABILITY=default`` and ``avx2`` on 65 to 85% of the elements
of a float32 resize (its AVX2 build takes other loops), so no lowering gives them on
every CPU. The lowering that was here (ATen's window weights as constant matrices,
``W_h @ x @ W_w^T``) differed from eager in the last bits of most elements and turned an
infinity into NaN (``inf * 0`` in the matrix product) where eager skips the zero weights.
The region runs eagerly, with eager's results.

``grid_sampler_3d`` (``F.grid_sample`` of a 5-D input; PyTorch has no decomposition for
it): ATen's scalar CPU loop, vectorised. Per output point the three grid coordinates go
through the same float steps (unnormalise, border clip or reflection, then clip), then
either the eight trilinear corners are gathered and their products of distances summed in
the kernel's corner order, skipping (adding nothing for) corners outside the input, or the
nearest voxel (round half to even) is gathered, 0 outside.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar
from torchneuron.compiler.errors import PrepareError

__all__ = ["RESAMPLE_DECOMPOSITIONS", "area_pixel_scale"]

aten = torch.ops.aten
RESAMPLE_DECOMPOSITIONS: dict[Any, Any] = {}
_register = registrar(RESAMPLE_DECOMPOSITIONS)


def area_pixel_scale(in_size: int, out_size: int, align_corners: bool, scale: float | None) -> float:
    """ATen's area_pixel_compute_scale: input pixels per output pixel."""
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if scale is not None and scale > 0:
        return 1.0 / scale
    return in_size / out_size


def _refuse_aa(*args: Any, **kwargs: Any) -> Any:
    if torch._guards.TracingContext.try_get() is not None:
        return NotImplemented  # AOTAutograd's trace: prepare's own trace refuses
    raise PrepareError(
        "aten._upsample_bilinear2d_aa: eager's antialiased resize gives different bits on "
        "each CPU code path (ATEN_CPU_CAPABILITY=default and avx2), so no lowering gives "
        "them everywhere; this region runs eagerly, with eager's results.",
        op="aten._upsample_bilinear2d_aa", reason="upsample-antialias")


RESAMPLE_DECOMPOSITIONS[aten._upsample_bilinear2d_aa.default] = _refuse_aa
RESAMPLE_DECOMPOSITIONS[aten._upsample_bilinear2d_aa.vec] = _refuse_aa


# --------------------------------------------------------------------------- grid_sampler_3d


def _clip(c: torch.Tensor, size: int) -> torch.Tensor:
    """ATen's ``min(size - 1, max(c, 0))`` with std::min / std::max: NaN becomes size - 1."""
    c = torch.where(c < 0, torch.zeros_like(c), c)
    return torch.where(c < size - 1, c, torch.full_like(c, size - 1))


def _reflect(c: torch.Tensor, twice_low: int, twice_high: int) -> torch.Tensor:
    """Fold c into [low, high] by reflections (bounds given doubled), as ATen does."""
    if twice_low == twice_high:
        return torch.zeros_like(c)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    c = torch.abs(c - low)
    extra = torch.fmod(c, span)
    even = torch.remainder(torch.floor(c / span), 2) == 0
    return torch.where(even, extra + low, span - extra + low)


def _source_index(coord: torch.Tensor, size: int, padding_mode: int, align_corners: bool
                  ) -> torch.Tensor:
    """ATen's grid_sampler_compute_source_index: [-1, 1] to input pixels, then padding."""
    if align_corners:
        c = (coord + 1) / 2 * (size - 1)
    else:
        c = ((coord + 1) * size - 1) / 2
    if padding_mode == 1:  # border
        c = _clip(c, size)
    elif padding_mode == 2:  # reflection
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
        c = _clip(c, size)
    return c


@_register(aten.grid_sampler_3d.default)
def grid_sampler_3d(x: torch.Tensor, grid: torch.Tensor, interpolation_mode: int,
                    padding_mode: int, align_corners: bool) -> Any:
    """Bilinear (0) and nearest (1); anything else (an empty input, other modes) is left
    to the op, which stays refused."""
    n, c, d, h, w = x.shape
    if interpolation_mode not in (0, 1) or padding_mode not in (0, 1, 2) or x.numel() == 0 \
            or grid.numel() == 0 or not x.dtype.is_floating_point or grid.dtype != x.dtype:
        return NotImplemented
    out_shape = (n, c, *grid.shape[1:4])
    ix = _source_index(grid[..., 0], w, padding_mode, align_corners)
    iy = _source_index(grid[..., 1], h, padding_mode, align_corners)
    iz = _source_index(grid[..., 2], d, padding_mode, align_corners)
    flat = x.reshape(n, c, d * h * w)

    def corner(zs: torch.Tensor, ys: torch.Tensor, xs: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(values at the voxel, or 0 where it is outside; the inside mask)."""
        inside = (xs >= 0) & (xs < w) & (ys >= 0) & (ys < h) & (zs >= 0) & (zs < d)
        zero = torch.zeros_like(xs)
        pos = (torch.where(inside, zs, zero) * h + torch.where(inside, ys, zero)) * w \
            + torch.where(inside, xs, zero)
        idx = pos.to(torch.int64).reshape(n, 1, -1).expand(n, c, -1)
        vals = torch.gather(flat, 2, idx).reshape(out_shape)
        return vals, inside.unsqueeze(1)

    if interpolation_mode == 1:
        vals, inside = corner(torch.round(iz), torch.round(iy), torch.round(ix))
        return torch.where(inside, vals, torch.zeros_like(vals))
    x0, y0, z0 = torch.floor(ix), torch.floor(iy), torch.floor(iz)
    x1, y1, z1 = x0 + 1, y0 + 1, z0 + 1
    wx = (x1 - ix, ix - x0)  # weight of the x0 corner, of the x1 corner
    wy = (y1 - iy, iy - y0)
    wz = (z1 - iz, iz - z0)
    out = torch.zeros(out_shape, dtype=x.dtype, device=x.device)
    # ATen's order: tnw, tne, tsw, tse (z0), then bnw, bne, bsw, bse (z1)
    for k in range(2):
        for j in range(2):
            for i in range(2):
                vals, inside = corner((z0, z1)[k], (y0, y1)[j], (x0, x1)[i])
                weight = (wx[i] * wy[j] * wz[k]).unsqueeze(1)
                out = out + torch.where(inside, vals * weight, torch.zeros_like(vals))
    return out
