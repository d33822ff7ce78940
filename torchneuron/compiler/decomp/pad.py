"""``replication_pad1d/2d/3d_backward`` as ``index_add`` per padded dim.

This torch-mlir lowers replication padding forward (PyTorch's decomposition clamps
the indices) but not its backward, so ReplicationPad training graphs ran eagerly.
The forward reads input index ``clamp(i - left, 0, size - 1)`` along each padded dim,
independently per dim; its gradient adds each output gradient onto that index, one
dim at a time (last dim first, as the padding list names them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["PAD_DECOMPOSITIONS"]

aten = torch.ops.aten


def _replication_pad_backward(grad: torch.Tensor, x: torch.Tensor,
                              padding: Sequence[int]) -> torch.Tensor:
    g = grad
    nd = len(padding) // 2
    for i in range(nd):
        dim = x.dim() - 1 - i
        left = padding[2 * i]
        size = x.shape[dim]
        idx = (torch.arange(g.shape[dim], device=grad.device) - left).clamp(0, size - 1)
        shape = list(g.shape)
        shape[dim] = size
        g = torch.zeros(shape, dtype=grad.dtype, device=grad.device).index_add(dim, idx, g)
    return g


PAD_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    op: _replication_pad_backward
    for op in (aten.replication_pad1d_backward.default, aten.replication_pad2d_backward.default,
               aten.replication_pad3d_backward.default)
}
