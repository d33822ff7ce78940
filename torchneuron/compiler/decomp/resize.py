"""``resize_`` / ``resize_as_`` where the result's values are defined, and 0-d ``as_strided``.

Functionalization turns ``x.resize_(size)`` into the functional ``aten.resize`` (which
Torch-MLIR cannot lower) plus an ``as_strided`` view of ``x`` with the new size and
contiguous strides. ATen's ``resize_`` keeps the storage: when the new size has no more
elements than ``x`` the result reads the first elements of ``x``'s storage in order, so for a
contiguous ``x`` it is ``x.reshape(-1)[:n].view(size)``; when it grows, the extra elements
are uninitialised memory, which no compiled graph can reproduce, so that case is left to
the op (refused at lowering, it runs eagerly). A size equal to ``x``'s is a no-op for any
layout.

``as_strided`` with a one-element result crashes Torch-MLIR's lowering when the input or
the result is 0-d (the worker died on ``resize_(())`` and ``resize_((1, 1, 1))`` of a 0-d
tensor): the result is the one storage element at the offset, taken here as a select of
the flattened contiguous input and a view to the size, which lowers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["RESIZE_DECOMPOSITIONS"]

aten = torch.ops.aten
RESIZE_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(RESIZE_DECOMPOSITIONS)


def _leading(x: torch.Tensor, size: Sequence[int]) -> Any:
    """The first prod(size) elements of contiguous ``x`` in ``size``'s shape, or
    NotImplemented when those are not x's values in storage order."""
    size = [int(s) for s in size]
    if list(x.shape) == size:
        return aten.clone.default(x)
    n = math.prod(size)
    if n > x.numel() or not x.is_contiguous() or x.storage_offset() != 0:
        return NotImplemented
    return aten.clone.default(x.reshape(-1)[:n].view(size))


@_register(aten.resize.default)
def resize(x: torch.Tensor, size: Sequence[int], memory_format: Any = None) -> Any:
    if memory_format not in (None, torch.contiguous_format):
        return NotImplemented
    return _leading(x, size)


@_register(aten.resize_as.default)
def resize_as(x: torch.Tensor, template: torch.Tensor, memory_format: Any = None) -> Any:
    if memory_format not in (None, torch.contiguous_format):
        return NotImplemented
    return _leading(x, template.shape)


@_register(aten.as_strided.default)
def as_strided(x: torch.Tensor, size: Sequence[int], stride: Sequence[int],
               storage_offset: int | None = None) -> Any:
    """Only a one-element result (0-d, or all sizes 1) of a contiguous input: a view of
    the element at the offset."""
    offset = x.storage_offset() if storage_offset is None else int(storage_offset)
    if math.prod(int(s) for s in size) != 1 or not x.is_contiguous() \
            or x.storage_offset() != 0 or not 0 <= offset < x.numel():
        return NotImplemented
    one = x.reshape(-1)[offset]
    return one if len(size) == 0 else one.view([int(s) for s in size])
