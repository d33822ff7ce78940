"""float16 / bfloat16 vector norms computed in float32 and rounded once, as eager's.

ATen's CPU ``linalg_vector_norm`` of a reduced-precision tensor accumulates in float32,
takes the root there and rounds the norm to the half type once: eager's float16 norms
equal the float32 norms of the same values rounded, bit for bit (every order checked:
1, 2, 3, inf). The lowering computed in the half type; a fifth of a small float16
``vector_norm``'s results and of ``F.normalize``'s outputs differed from eager, 2 ulps
at worst (found by tools/special_sweep.py on nn.functional.normalize). Other dtypes, and
calls asking for an output ``dtype``, keep their entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["half_norm_decompositions"]

aten = torch.ops.aten
_HALVES = (torch.float16, torch.bfloat16)


def _wrap(base: Callable[..., Any] | None) -> Callable[..., Any]:
    def linalg_vector_norm(x: torch.Tensor, ord: Any = 2, dim: Any = None,  # noqa: A002
                           keepdim: bool = False, *, dtype: Any = None) -> Any:
        if x.dtype in _HALVES and dtype is None:
            wide = aten.linalg_vector_norm.default(x.to(torch.float32), ord, dim, keepdim)
            return wide.to(x.dtype)
        if base is None:
            return NotImplemented
        return base(x, ord, dim, keepdim, dtype=dtype)

    return linalg_vector_norm


def half_norm_decompositions(base: dict[Any, Callable[..., Any]]
                             ) -> dict[Any, Callable[..., Any]]:
    """Entries wrapping ``base``'s (the table built so far): other dtypes keep them."""
    return {aten.linalg_vector_norm.default: _wrap(base.get(aten.linalg_vector_norm.default))}
