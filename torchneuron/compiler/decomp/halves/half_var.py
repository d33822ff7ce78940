"""float16 / bfloat16 variance and standard deviation computed in float64, as eager's.

ATen's CPU ``var`` / ``std`` / ``var_mean`` / ``std_mean`` accumulate every floating
dtype in double (Welford with a double accumulator), take the square root there, and
convert the result to the input's type through float. The lowering computed a half
type's variance in float32, whose squared deviations overflow past 1.8e19: bfloat16
``std([3e38, -3e38, 1, 2])`` was inf where eager gives 2.46e38 (found by
tools/special_sweep.py, the ``big`` variant). Here a half-type input is widened to
float64, the float64 entry computes the statistics (degenerate corrections included)
and the results are narrowed through float32. Other dtypes keep their entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["half_var_decompositions"]

aten = torch.ops.aten
_HALVES = (torch.float16, torch.bfloat16)
_OPS = (aten.var.correction, aten.std.correction, aten.var_mean.correction,
        aten.std_mean.correction)


def _narrow(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.to(torch.float32).to(dtype)


def _wrap(op: Any, base: Callable[..., Any] | None) -> Callable[..., Any]:
    def decomposition(x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if x.dtype not in _HALVES:
            return base(x, *args, **kwargs) if base is not None else NotImplemented
        out = op(x.to(torch.float64), *args, **kwargs)
        if isinstance(out, tuple):
            return tuple(_narrow(t, x.dtype) for t in out)
        return _narrow(out, x.dtype)

    return decomposition


def half_var_decompositions(base: dict[Any, Callable[..., Any]]
                            ) -> dict[Any, Callable[..., Any]]:
    """Entries wrapping ``base``'s (the table built so far): other dtypes keep them."""
    return {op: _wrap(op, base.get(op)) for op in _OPS}
