"""``mean`` of float16 / bfloat16 as eager computes it: in float32, rounded once.

ATen's CPU mean of a reduced-precision tensor casts to float32, sums, divides and casts
back ("for accuracy reasons"); the lowering summed and divided in the input's precision,
so the mean of 1000 float16 values of 100 was inf (the float16 sum overflows) where eager
gives 100, and bfloat16 means were off by an ulp or more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["HALF_MEAN_DECOMPOSITIONS"]

aten = torch.ops.aten
HALF_MEAN_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(HALF_MEAN_DECOMPOSITIONS)
_HALVES = (torch.float16, torch.bfloat16)


@_register(aten.mean.dim)
def mean_dim(x: torch.Tensor, dim: Any = None, keepdim: bool = False, *,
             dtype: torch.dtype | None = None) -> Any:
    if x.dtype not in _HALVES or dtype not in (None, x.dtype):
        return NotImplemented
    return torch.mean(x.to(torch.float32), dim, keepdim).to(x.dtype)


@_register(aten.mean.default)
def mean(x: torch.Tensor, *, dtype: torch.dtype | None = None) -> Any:
    if x.dtype not in _HALVES or dtype not in (None, x.dtype):
        return NotImplemented
    return torch.mean(x.to(torch.float32)).to(x.dtype)
