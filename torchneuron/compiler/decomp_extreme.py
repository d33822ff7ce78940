"""``max.dim`` / ``min.dim`` as ``argmax`` / ``argmin`` and a gather of the values.

ATen takes a NaN over any number and reports the first NaN's index, as its ``argmax``
does. This torch-mlir lowers ``max.dim`` to a reduction whose comparator drops NaN, so a
compiled ``t.max(0)`` of ``[1, nan, 3, nan, -1]`` gave ``(-1, 4)`` where eager gives
``(nan, 1)``; its ``argmax`` / ``argmin`` keep ATen's NaN rule and first-index ties, so
the values are read back at their indices. The lowering was wrong for bool inputs too
(``max(1)`` of ``[[True, False], [False, False]]`` gave ``[True, True]``): their indices
come from the argmax of the input as integers. 0-d inputs keep the lowering.

The max-pooling decompositions reduce their windows with ``max.dim`` and pick NaNs out
themselves; they call it under ``lowered_extremes()``, which keeps the lowering there, so
their graphs (and the simulated time of the programs) stay as they were. The torch.compile
backend prepares AOTAutograd's graphs under it too: that trace, with the same table,
already decomposed the user's calls, and the ones left are the pools'.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch

from torchneuron.compiler.decomp_registry import registrar

__all__ = ["EXTREME_DECOMPOSITIONS", "lowered_extremes"]

aten = torch.ops.aten
EXTREME_DECOMPOSITIONS: dict[Any, Any] = {}
_register = registrar(EXTREME_DECOMPOSITIONS)
_LOWERED = ContextVar("lowered_extremes", default=False)


@contextlib.contextmanager
def lowered_extremes() -> Iterator[None]:
    """Within: ``max.dim`` / ``min.dim`` keep torch-mlir's lowering (the caller handles
    NaN and bool itself)."""
    token = _LOWERED.set(True)
    try:
        yield
    finally:
        _LOWERED.reset(token)


def _extreme(arg: Any, x: torch.Tensor, dim: int, keepdim: bool) -> Any:
    if x.dim() == 0 or _LOWERED.get():
        return NotImplemented
    idx = arg(x.to(torch.int32) if x.dtype == torch.bool else x, dim, True)
    val = aten.gather.default(x, dim, idx)
    if keepdim:
        return val, idx
    return val.squeeze(dim), idx.squeeze(dim)


@_register(aten.max.dim)
def max_dim(x: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
    return _extreme(aten.argmax.default, x, dim, keepdim)


@_register(aten.min.dim)
def min_dim(x: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
    return _extreme(aten.argmin.default, x, dim, keepdim)
