"""``embedding_bag`` (sum / mean / max, offsets, per-sample weights, padding_idx,
include_last_offset) as gathers and segment reductions.

Torch-MLIR has no lowering for it. ATen's CPU kernel, and what is rebuilt here:

- bag ``b`` holds the indices ``offsets[b] <= i < offsets[b + 1]`` (the last bag runs to
  the end, or to ``offsets[-1]`` with ``include_last_offset``); ``offset2bag[i]`` is the
  number of offsets ``<= i`` minus one, as ATen's cumsum builds it;
- an index equal to ``padding_idx`` takes no part (and is not counted in ``bag_size``);
- sum: the rows times their per-sample weights added per bag (``index_add``; the order
  of a bag's additions may differ from FBGEMM's, within rounding); mean: the sum divided
  by ``max(bag_size, 1)``; max: per feature, the first row of the bag unless a later one
  is strictly greater (so a NaN first row stays NaN, a later NaN never wins, and ties keep
  the earlier row), with the winning row's index in ``max_indices``; empty bags are 0;
- the auxiliary outputs have eager's shapes; where eager leaves them uninitialised
  (``bag_size`` / ``max_indices`` of a sum without grad, ``offset2bag`` of FBGEMM's fast
  sum path, which is empty) they are zeros.

Eager raises on an index outside ``[0, num_embeddings)``, on ``offsets[0] != 0`` and on
``offsets[-1] > len(indices)``; compiled code would read clamped rows instead. Each is a
lifted range check here (``torchneuron::index_bounds``, raised after the run with a
RuntimeError, eager's type; the message is index_bounds' own), and so are decreasing
offsets, whose eager result is undefined. The max mode's dense (bags x indices x features)
comparison is refused beyond 2^24 elements (NotImplemented: the op runs eagerly).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["EMBEDDING_BAG_DECOMPOSITIONS"]

aten = torch.ops.aten
EMBEDDING_BAG_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(EMBEDDING_BAG_DECOMPOSITIONS)

_SUM, _MEAN, _MAX = 0, 1, 2
_MAX_DENSE = 1 << 24


def _check(index: torch.Tensor, low: int, high: int) -> None:
    from torchneuron.compiler.prepare.index_bounds import INDEX_BOUNDS

    INDEX_BOUNDS(index, low, high, 0, "scatter")


def _fast_sum_path(weight: torch.Tensor, psw: torch.Tensor | None, padding_idx: int) -> bool:
    """ATen's is_fast_path: FBGEMM sums, and skips building offset2bag."""
    return (weight.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and weight.stride(1) == 1 and padding_idx < 0
            and (psw is None or psw.stride(0) == 1))


def _bag_outputs(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                 mode: int, psw: torch.Tensor | None, include_last_offset: bool,
                 padding_idx: int, requires_grad: bool) -> Any:
    if indices.dim() != 1 or offsets.dim() != 1 or weight.dim() != 2 \
            or mode not in (_SUM, _MEAN, _MAX) or not weight.dtype.is_floating_point:
        return NotImplemented
    n, (vocab, dim) = indices.shape[0], weight.shape
    num_bags = offsets.shape[0] - (1 if include_last_offset else 0)
    if num_bags <= 0 or (mode == _MAX and num_bags * n * dim > _MAX_DENSE):
        return NotImplemented
    idx = indices.to(torch.int64)
    offs = offsets.to(torch.int64)
    if n:
        _check(idx, 0, vocab)
    if offs.shape[0]:
        _check(offs[:1], 0, 1)
        _check(offs[-1:], 0, n + 1)
        if offs.shape[0] > 1:
            _check(offs[1:] - offs[:-1], 0, n + 1)
    starts = offs[:num_bags]
    pos = torch.arange(n, device=idx.device)
    bag = (starts.unsqueeze(0) <= pos.unsqueeze(1)).to(torch.int64).sum(1) - 1  # offset2bag
    slot = bag.clamp(min=0)
    padded = idx == padding_idx if padding_idx >= 0 else torch.zeros_like(idx, dtype=torch.bool)
    keep = ~padded
    fast = mode != _MAX and _fast_sum_path(weight, psw, padding_idx)
    if fast and include_last_offset and offs.shape[0]:
        keep = keep & (pos < offs[-1])  # FBGEMM stops at the last offset; the rest run to n
    # ATen's make_bag_size: offset differences, the last bag to the end of the indices
    ends = torch.cat([offs[1:num_bags], offs.new_full((min(num_bags, 1),), n)])
    pads = torch.zeros(num_bags, dtype=torch.int64, device=idx.device) \
        .index_add(0, slot, padded.to(torch.int64))
    bag_size = ends - starts - pads
    if mode == _MAX:
        out, max_indices = _bag_max(aten.index_select(weight, 0, torch.where(keep, idx, 0)),
                                    idx, bag, keep, num_bags)
    else:
        rows = aten.index_select(weight, 0, torch.where(keep, idx, 0))  # checked above
        contrib = rows if psw is None else rows * psw.unsqueeze(1)
        contrib = torch.where(keep.unsqueeze(1), contrib, torch.zeros_like(contrib))
        out = torch.zeros(num_bags, dim, dtype=weight.dtype, device=weight.device) \
            .index_add(0, slot, contrib)
        if mode == _MEAN:
            out = out / bag_size.clamp(min=1).to(out.dtype).unsqueeze(1)
    itype = dict(dtype=offsets.dtype, device=offsets.device)
    if mode == _SUM:  # neither is filled for a sum: eager's are zeros of these shapes
        size_out = torch.zeros(num_bags if requires_grad else offs.shape[0], **itype)
        max_indices = torch.zeros(size_out.shape, **itype)
    else:
        size_out = bag_size.to(offsets.dtype)
        max_indices = size_out.clone() if mode == _MEAN else max_indices.to(offsets.dtype)
    offset2bag = torch.zeros(0, **itype) if mode == _SUM and fast else bag.to(offsets.dtype)
    return out, offset2bag, size_out, max_indices


def _bag_max(rows: torch.Tensor, idx: torch.Tensor, bag: torch.Tensor, keep: torch.Tensor,
             num_bags: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ATen's sequential max per bag and feature (see the module docstring)."""
    n = rows.shape[0]
    member = (bag.unsqueeze(0) == torch.arange(num_bags, device=bag.device).unsqueeze(1)) \
        & keep.unsqueeze(0)  # (B, N)
    pos = torch.arange(n, device=bag.device)
    first = torch.where(member, pos.unsqueeze(0), n).amin(1)  # (B,); n: empty bag
    nonempty = first < n
    first_c = first.clamp(max=max(n - 1, 0))
    first_val = rows[first_c]  # (B, D)
    vals = rows.unsqueeze(0)  # (1, N, D)
    m3 = member.unsqueeze(2)  # (B, N, 1)
    usable = m3 & ~torch.isnan(vals)
    best = torch.where(usable, vals, -torch.inf).amax(1)  # (B, D)
    hit = usable & (vals == best.unsqueeze(1))
    win = torch.where(hit, pos.view(1, n, 1), n).amin(1)  # (B, D)
    win = torch.where(torch.isnan(first_val) | (win >= n), first_c.unsqueeze(1), win)
    value = torch.gather(rows, 0, win.clamp(max=max(n - 1, 0)))
    value = torch.where(nonempty.unsqueeze(1), value, torch.zeros_like(value))
    which = torch.where(nonempty.unsqueeze(1), idx[win.clamp(max=max(n - 1, 0))],
                        torch.zeros_like(win))
    return value, which


def _requires_grad(weight: torch.Tensor, psw: torch.Tensor | None) -> bool:
    return weight.requires_grad or (psw is not None and psw.requires_grad)


@_register(aten.embedding_bag.padding_idx)
def embedding_bag_padding_idx(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                              scale_grad_by_freq: bool, mode: int, sparse: bool,
                              per_sample_weights: torch.Tensor | None,
                              include_last_offset: bool, padding_idx: int | None) -> Any:
    """The composite picks ``_embedding_bag`` when grad is needed, else the forward-only
    kernel; they differ only in whether a sum's ``bag_size`` is filled."""
    pad = -1 if padding_idx is None else int(padding_idx)
    return _bag_outputs(weight, indices, offsets, mode, per_sample_weights,
                        include_last_offset, pad, _requires_grad(weight, per_sample_weights))


@_register(aten.embedding_bag.default)
def embedding_bag(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                  scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                  per_sample_weights: torch.Tensor | None = None,
                  include_last_offset: bool = False) -> Any:
    return _bag_outputs(weight, indices, offsets, mode, per_sample_weights,
                        include_last_offset, -1, _requires_grad(weight, per_sample_weights))


@_register(aten._embedding_bag.default)
def _embedding_bag(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                   scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                   per_sample_weights: torch.Tensor | None = None,
                   include_last_offset: bool = False, padding_idx: int = -1) -> Any:
    return _bag_outputs(weight, indices, offsets, mode, per_sample_weights,
                        include_last_offset, padding_idx, True)


@_register(aten._embedding_bag_forward_only.default)
def _embedding_bag_forward_only(weight: torch.Tensor, indices: torch.Tensor,
                                offsets: torch.Tensor, scale_grad_by_freq: bool = False,
                                mode: int = 0, sparse: bool = False,
                                per_sample_weights: torch.Tensor | None = None,
                                include_last_offset: bool = False, padding_idx: int = -1
                                ) -> Any:
    return _bag_outputs(weight, indices, offsets, mode, per_sample_weights,
                        include_last_offset, padding_idx, False)
