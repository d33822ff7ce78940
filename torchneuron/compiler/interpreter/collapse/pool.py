"""Max-pooling's forward over the two trailing dims as ATen's own kernel.

Why: ``window`` recognises the lowered max-pooling forward (one strided slice per window
position, a concatenate, a reshape and a max-with-first-index reduce) and runs it as
one op; its general form still makes three torch calls per window position. When the
pooled dims are the two trailing ones, ``aten.max_pool2d_with_indices`` computes the
same values in one pass (on the CNN loop's pools about a third of the time, run in
channels-last layout), and its flat indices give each output's window position with a
subtraction and a table lookup.

Same bits: the kernel scans each window in row-major order and keeps the first strictly
greater element, as the reduce's (value, first index) pairing does, so values (signed
zeros included) and positions agree. A NaN in a window, or a window whose maximum does
not beat the reduce's init value, fails ``v > init``; then the original ops run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import OpFn, Runner
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["native_max_pool2d", "pool_with_flat_index"]

_max_pool2d = torch.ops.aten.max_pool2d_with_indices.default


def native_max_pool2d(
    src_shape: tuple[int, ...], kernel: list[int], stride: list[int],
    out_shape: tuple[int, ...], slow: OpFn,
) -> OpFn | None:
    """The fused callable for a pool over the two trailing dims of a rank-3 or rank-4
    input (None: another layout, left to the general form)."""
    if len(src_shape) not in (3, 4) or len(kernel) != 2:
        return None
    w_in = src_shape[-1]
    kh, kw = kernel
    sh, sw = stride[-2], stride[-1]
    oh, ow = out_shape[-2], out_shape[-1]
    # flat input index of each output's window start, and from the offset past it
    # (dh * W + dw) to the window position (dh * kw + dw)
    base = (torch.arange(oh) * (sh * w_in))[:, None] + (torch.arange(ow) * sw)[None, :]
    position = torch.zeros((kh - 1) * w_in + kw, dtype=torch.int64)
    for dh in range(kh):
        position[dh * w_in: dh * w_in + kw] = torch.arange(kw) + dh * kw
    pool = pool_with_flat_index(src_shape, kernel, stride)

    def max_pool(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x, _, init, _ = args
        hit = pool(x, init)
        if hit is None:  # a NaN, or init wins somewhere: the exact run
            return slow(op, args, run)
        v, flat = hit
        return [v, position[flat.sub_(base)]]

    return max_pool


def pool_with_flat_index(
    src_shape: tuple[int, ...], kernel: list[int], stride: list[int],
) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor] | None]:
    """ATen's pool over the two trailing dims of a rank-3 or rank-4 float input: each
    window's maximum and its flat index in the input's plane, contiguous; None where
    the reduce's run could differ (a NaN, a window whose maximum does not beat ``init``)."""
    sh, sw = stride[-2], stride[-1]
    # NCHW: ATen's channels-last kernel is several times faster than its planar one on
    # small planes, even with the two layout copies (the same scan, the same results)
    layout = torch.channels_last if len(src_shape) == 4 else None

    def pool(x: torch.Tensor, init: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        if x.dim() != len(src_shape) or not x.dtype.is_floating_point:
            return None
        if layout is None:
            v, flat = _max_pool2d(x, kernel, [sh, sw])
        else:
            v, flat = _max_pool2d(x.contiguous(memory_format=layout), kernel, [sh, sw])
            v, flat = v.contiguous(), flat.contiguous()
        # every maximum beats ``init`` (and none is NaN): the smallest does (``min``
        # propagates NaN, which beats nothing); one reduction, no mask of ``v``'s size
        if v.numel() and not bool(v.min() > init):
            return None
        return v, flat

    return pool
