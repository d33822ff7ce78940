"""Chebyshev polynomials (T, U, V, W and their shifted forms) from closed forms.

ATen evaluates them by the three-term recurrence, whose trip count is data (n is a
tensor); the trigonometric / hyperbolic closed forms have a static graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["POLYNOMIAL_DECOMPOSITIONS"]

aten = torch.ops.aten
POLYNOMIAL_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(POLYNOMIAL_DECOMPOSITIONS)


def _float(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())


def _cheb(x: torch.Tensor, n: torch.Tensor | float, kind: str) -> torch.Tensor:
    """Chebyshev T/U/V/W from their trigonometric / hyperbolic closed forms (ATen uses the
    three-term recurrence, whose trip count is data: n is a tensor)."""
    x = _float(x)
    n = torch.trunc(torch.as_tensor(n, dtype=x.dtype, device=x.device))
    odd = torch.remainder(n, 2) == 1
    sgn = torch.where(odd & (x < 0), -1.0, 1.0)
    inside = torch.abs(x) < 1
    th = torch.acos(torch.clamp(x, -1 + 1e-7, 1 - 1e-7))
    t = torch.acosh(torch.where(inside, 2.0 + 0 * x, torch.abs(x)))
    if kind == "t":
        # ATen: cos(n acos x), unclamped (no division here needs the clamp)
        a, b = torch.cos(n * torch.acos(torch.where(inside, x, 0.0))), torch.cosh(n * t) * sgn
        edge = torch.where(x > 0, 1.0, torch.where(odd, -1.0, 1.0))
    elif kind == "u":
        a = torch.sin((n + 1) * th) / torch.sin(th)
        b = torch.sinh((n + 1) * t) / torch.sinh(t) * sgn
        edge = (n + 1) * torch.where(x > 0, 1.0, torch.where(odd, -1.0, 1.0))
    else:  # v, w: V_n(-x) = (-1)^n W_n(x)
        v = kind == "v"
        a = (torch.cos((n + 0.5) * th) / torch.cos(th / 2) if v
             else torch.sin((n + 0.5) * th) / torch.sin(th / 2))
        pos_v = torch.cosh((n + 0.5) * t) / torch.cosh(t / 2)
        pos_w = torch.sinh((n + 0.5) * t) / torch.sinh(t / 2)
        flip = torch.where(odd, -1.0, 1.0)
        b = torch.where(x > 0, pos_v if v else pos_w, flip * (pos_w if v else pos_v))
        one = torch.where(x > 0, 1.0 if v else 2 * n + 1, flip * ((2 * n + 1) if v else 1.0))
        edge = one + 0 * x
    out = torch.where(inside, a, torch.where(torch.abs(x) == 1, edge, b))
    return torch.where(n < 0, 0.0 * x, out)


for _kind in "tuvw":
    _op = getattr(aten, f"special_chebyshev_polynomial_{_kind}")
    _sop = getattr(aten, f"special_shifted_chebyshev_polynomial_{_kind}")
    _register(_op.default)(lambda x, n, k=_kind: _cheb(x, n, k))
    _register(_sop.default)(lambda x, n, k=_kind: _cheb(2 * _float(x) - 1, n, k))
