"""An eager kernel's operand in the memory layout eager handed it (its strides).

Why: a program's values have no layout (the interpreter hands a custom call whatever
tensor it computed: contiguous, or a view where it took one), but eager's kernels walk
their operands in the order of their strides. ATen's loops put the smallest stride
innermost, so a channels-last or transposed operand changes which elements fall in the
vectorized body (SLEEF's ``erf``) and which in the scalar tail (libm's), and in which
order a reduction sums (a channels-last ``gelu`` was off in 1459 of 2376 float32
elements, a channels-last training batch norm in 1228, a group norm in 1296; the batch
norm's backward sums a broadcast gradient, ``out.sum()``'s ones, in another order than
the same ones materialized: 96 of 96 off). So the call
records the strides eager's operand had (``prepare.custom_calls``: the node's value is
eager's tensor, its strides are eager's) and the target is handed the same values in a
tensor of those strides: ``in_layout``.

- ``layout_of(val)``: the strides to record, or None where they are the contiguous ones;
- ``in_layout(t, strides)``: ``t``'s values in a tensor of exactly ``strides`` (a
  contiguous one for None); broadcast (stride 0) and overlapping dims (``unfold``) hold
  their one value per place, as eager's did. The storage offset is not reproduced (it
  moves the data's alignment only; the kernel's loads do not depend on it).

Imports torch.
"""

from __future__ import annotations

import torch

__all__ = ["layout_of", "in_layout"]


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def layout_of(val: torch.Tensor) -> list[int] | None:
    """``val``'s strides when they are not the contiguous ones (size-1 dims included:
    a kernel picking its path from ``suggest_memory_format`` reads those too)."""
    strides = tuple(int(s) for s in val.stride())
    return None if strides == _contiguous_strides(tuple(val.shape)) else list(strides)


def _overlaps(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether two indices of a view of these sizes and strides share a place (stride-0
    dims excluded: the caller narrowed them)."""
    reach = 0  # the largest offset the inner dims reach
    for n, s in sorted((p for p in zip(shape, strides, strict=True) if p[0] > 1),
                       key=lambda p: p[1]):
        if s <= reach:
            return True
        reach += (n - 1) * s
    return False


def in_layout(t: torch.Tensor, strides: list[int] | None) -> torch.Tensor:
    """``t``'s values in a tensor whose strides are ``strides`` (None: contiguous)."""
    if strides is None:
        return t.contiguous()
    want = tuple(strides)
    if tuple(t.stride()) == want:
        return t
    shape = tuple(t.shape)
    if t.numel() == 0:
        return torch.empty_strided(shape, want, dtype=t.dtype, device=t.device)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, want, strict=True))
    buf = t.new_empty(span)
    one = t  # one value per broadcast dim (they are equal along it, as eager's were)
    for d, (n, s) in enumerate(zip(shape, want, strict=True)):
        if s == 0 and n > 1:
            one = one.narrow(d, 0, 1)
    if not _overlaps(tuple(one.shape), want):
        buf.as_strided(tuple(one.shape), want).copy_(one)
    else:  # (``copy_`` refuses a destination whose places repeat: write by offset)
        offsets = torch.zeros((), dtype=torch.long)
        for n, s in zip(one.shape, want, strict=True):
            offsets = offsets.unsqueeze(-1) + torch.arange(n) * s
        buf[offsets.reshape(-1)] = one.reshape(-1)
    return buf.as_strided(shape, want)
