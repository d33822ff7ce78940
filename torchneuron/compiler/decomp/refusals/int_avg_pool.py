"""Integer average pooling is refused: the lowering returned float32 where eager gives int64.

ATen's CPU ``avg_pool2d`` / ``avg_pool3d`` accept int64 (``avg_pool1d`` goes through
``avg_pool2d``): they sum each window in int64 and divide by the window count (or the
divisor override) with C's truncating integer division, keeping the int64 dtype. The
lowering computed the average in float32 and returned a float32 tensor, a result of the
wrong dtype (found by tools/special_sweep.py). Integer pooling is rare in training, so the
graph runs eagerly instead, with a typed reason; floating inputs keep their entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.errors import PrepareError

__all__ = ["int_avg_pool_decompositions"]

aten = torch.ops.aten
_OPS = (aten.avg_pool2d.default, aten.avg_pool3d.default)


def _tracing() -> bool:
    """True while AOTAutograd traces (torch.compile): a raise there escapes it, so the op
    stays a node and prepare refuses it."""
    return torch._guards.TracingContext.try_get() is not None


def _wrap(op: Any, base: Callable[..., Any] | None) -> Callable[..., Any]:
    name = f"aten.{op.__name__.split('.')[0]}"

    def decomposition(x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if x.is_floating_point() or x.is_complex():
            return base(x, *args, **kwargs) if base is not None else NotImplemented
        if _tracing():
            return NotImplemented
        raise PrepareError(
            f"{name} on {x.dtype}: eager sums each window in int64 and divides with "
            "truncation, keeping the integer dtype; the lowering averages in float32. "
            "This region runs eagerly.", op=name, reason="integer-avg-pool")

    return decomposition


def int_avg_pool_decompositions(base: dict[Any, Callable[..., Any]]
                                ) -> dict[Any, Callable[..., Any]]:
    """Entries wrapping ``base``'s (the table built so far): floating inputs keep them."""
    return {op: _wrap(op, base.get(op)) for op in _OPS}
