"""float16 / bfloat16 convolutions computed in float32 and rounded once, as eager's.

ATen's CPU convolutions of reduced-precision tensors accumulate in float32 and round
the result (bias included) to the half type once: eager's float16 ``conv2d`` equals the
float32 convolution of the same values rounded to float16, bit for bit. The lowering
convolved in the half type, rounding partial sums: a quarter of a small float16
depthwise convolution's outputs differed from eager, some by 3 ulps (beyond float16's
tolerance; found by tools/special_sweep.py). Here the operands are widened, the
convolution runs in float32 (through the entries before this one) and the output is
narrowed. The float32 sums run in another order than ATen's, which rarely moves a
half-type rounding; float32 and float64 convolutions are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["half_conv_decompositions"]

aten = torch.ops.aten
_HALVES = (torch.float16, torch.bfloat16)


def _wrap(base: Callable[..., Any] | None) -> Callable[..., Any]:
    def convolution(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    *args: Any) -> Any:
        if x.dtype in _HALVES and weight.dtype == x.dtype \
                and (bias is None or bias.dtype == x.dtype):
            wide = aten.convolution.default(
                x.to(torch.float32), weight.to(torch.float32),
                None if bias is None else bias.to(torch.float32), *args)
            return wide.to(x.dtype)
        return base(x, weight, bias, *args) if base is not None else NotImplemented

    return convolution


def half_conv_decompositions(base: dict[Any, Callable[..., Any]]
                             ) -> dict[Any, Callable[..., Any]]:
    """Entries wrapping ``base``'s (the table built so far): other dtypes keep them."""
    return {aten.convolution.default: _wrap(base.get(aten.convolution.default))}
