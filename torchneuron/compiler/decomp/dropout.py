"""Dropout in the order of ATen's CPU kernel, and ``empty_permuted``'s layout.

Random ops are never decomposed (``prepare.random_ops`` lifts them out of the graph so
eager's own kernel draws them), with one exception: ``native_dropout`` becomes
``bernoulli.p`` + arithmetic in the exact order of ATen's CPU kernel, so the numbers
stay bitwise equal. ``empty_permuted`` (from dropout's ``empty_like``) keeps its layout,
which decides which element gets which draw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["DROPOUT_DECOMPOSITIONS", "native_dropout"]

aten = torch.ops.aten
DROPOUT_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(DROPOUT_DECOMPOSITIONS)


@_register(aten.native_dropout.default)
def native_dropout(x: torch.Tensor, p: float, train: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    """ATen CPU: mask = empty_like(x).bernoulli_(1-p); out = x.mul(mask).mul_(scale).

    ``empty_like`` keeps x's layout and ``bernoulli_`` fills memory in order, so the mask
    is drawn here as a *contiguous* tensor of x's physical shape and permuted back: the
    draw is then a plain ``bernoulli.p`` on a contiguous tensor, whose order no later
    pass can change (random_ops refuses ``bernoulli.p`` on any other layout).
    """
    from torch._prims_common import compute_elementwise_output_logical_to_physical_perm

    if train is False or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    p1m = 1.0 - p
    scale = 0.0 if p1m == 0 else 1.0 / p1m
    perm, _ = compute_elementwise_output_logical_to_physical_perm(x)
    physical = torch.empty([x.shape[d] for d in perm], dtype=x.dtype, device=x.device)
    inverse = [0] * len(perm)
    for i, d in enumerate(perm):
        inverse[d] = i
    mask = aten.bernoulli.p(physical, p1m).permute(inverse)
    out = x * mask * scale
    return out, mask.to(torch.bool)


@_register(aten.empty_permuted.default)
def empty_permuted(size: Sequence[int], physical_layout: Sequence[int], **kwargs: Any) -> torch.Tensor:
    """Keep the layout: values are unspecified, but a random op that fills this tensor
    (dropout's ``empty_like(x).bernoulli_(p)``) draws in memory order, so the strides
    decide which element gets which draw."""
    strides = [0] * len(size)
    step = 1
    for dim in reversed(list(physical_layout)):
        strides[dim] = step
        step *= max(int(size[dim]), 1)
    return torch.empty_strided(list(size), strides,
                               **{k: v for k, v in kwargs.items() if v is not None})
