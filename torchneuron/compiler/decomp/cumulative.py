"""``cumsum`` / ``cumprod`` / ``logcumsumexp`` accumulated in ATen's wider type.

ATen's CPU scan kernel (``cpu_cum_base_kernel``) carries the running value in
``acc_type``: float64 for float32 input, float32 for float16 / bfloat16, and rounds each
output once. The lowering scanned in the input's type, so float32 ``cumsum`` of
``[3.4e38, 5.8, ..., -3.4e38, ...]`` gave 10.3 where eager gives 0.0 (the large terms cancel
exactly in float64), ``cumprod`` overflowed to inf where eager's float64 product stays
finite, and float16 sums drifted by ulps. Here the scan runs in the accumulation type
(the existing lowerings, on converted input) and the result is rounded once: equal to
eager's sequential float64 scan after rounding to float32 (the two float64 results differ
far below float32's last bit). float64 and integer scans are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["CUMULATIVE_DECOMPOSITIONS"]

aten = torch.ops.aten
CUMULATIVE_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(CUMULATIVE_DECOMPOSITIONS)
_ACC = {torch.float32: torch.float64, torch.float16: torch.float32,
        torch.bfloat16: torch.float32}


def _acc(x: torch.Tensor, dtype: torch.dtype | None) -> tuple[torch.dtype, torch.dtype] | None:
    """(output dtype, accumulation dtype) when eager accumulates wider, else None."""
    out = dtype if dtype is not None else x.dtype
    if out not in _ACC or not (x.is_floating_point() or dtype is not None):
        return None
    return out, _ACC[out]


@_register(aten.cumsum.default)
def cumsum(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> Any:
    got = _acc(x, dtype)
    if got is None:
        return NotImplemented
    out, acc = got
    return aten.cumsum.default(x.to(out).to(acc), dim).to(out)


@_register(aten.cumprod.default)
def cumprod(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> Any:
    from torchneuron.compiler.decomp import table as decompositions

    got = _acc(x, dtype)
    if got is None:
        return decompositions.cumprod(x, dim, dtype)
    out, acc = got
    return decompositions.cumprod(x.to(out).to(acc), dim).to(out)


@_register(aten.logcumsumexp.default)
def logcumsumexp(x: torch.Tensor, dim: int) -> Any:
    from torchneuron.compiler.decomp import table as decompositions

    got = _acc(x, None)
    if got is None:
        return decompositions.logcumsumexp(x, dim)
    out, acc = got
    return decompositions.logcumsumexp(x.to(acc), dim).to(out)
