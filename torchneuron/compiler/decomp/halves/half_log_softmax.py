"""float16 / bfloat16 ``log_softmax`` over the last dimension, as eager's CPU kernel rounds it.

ATen's last-dimension kernel for reduced-precision input keeps its per-row sum of
``exp(x - max)`` and that sum's logarithm in buffers of the input's type: the sum is
rounded to float16 (bfloat16), its log taken in float32 and rounded again, and only then
``x - max - log`` is computed in float32 and rounded once. ``decomp.halves.opmath``'s entry
(everything in float32, rounded once) was up to 4 ulps off, and where the row sum is
just above 1 eager gives exactly 0 (the sum rounds to 1) where float32 gave -3.5e-4.
Measured: this form gives eager's bits on every element of float16 and bfloat16 rows of
1 to 5000 elements with inf, NaN and all -inf rows, under ``ATEN_CPU_CAPABILITY=default``
and ``avx2`` alike (the float32 sum is rounded to half precision before anything reads
it, so its summation order does not show). Other dimensions take ATen's other kernel,
which is float32 throughout, and keep ``decomp.halves.opmath``'s entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["half_log_softmax_decompositions"]

aten = torch.ops.aten
_HALVES = (torch.float16, torch.bfloat16)


def _wrap(base: Callable[..., Any] | None) -> Callable[..., Any]:
    def log_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> Any:
        if x.dtype not in _HALVES or half_to_float or x.dim() == 0 \
                or dim % x.dim() != x.dim() - 1:
            return base(x, dim, half_to_float) if base is not None else NotImplemented
        wide = x.to(torch.float32)
        top = torch.amax(wide, -1, keepdim=True)
        total = torch.sum(torch.exp(wide - top), -1, keepdim=True)
        total = total.to(x.dtype).to(torch.float32)
        log = torch.log(total).to(x.dtype).to(torch.float32)
        return (wide - top - log).to(x.dtype)

    return log_softmax


def half_log_softmax_decompositions(base: dict[Any, Callable[..., Any]]
                                    ) -> dict[Any, Callable[..., Any]]:
    """The ``_log_softmax`` entry, wrapping ``base``'s (other dims and dtypes keep it)."""
    op = aten._log_softmax.default
    return {op: _wrap(base.get(op))}
