"""Small dense linear algebra: triangular solves and Cholesky, as LAPACK computes them.

Unrolled for a static n (<= 32): O(n) row steps of vector work; enough for the
covariance-sized matrices that appear inside models. Larger n stays an eager op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["CHOLESKY_DECOMPOSITIONS"]

aten = torch.ops.aten
CHOLESKY_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(CHOLESKY_DECOMPOSITIONS)


# --------------------------------------------------------------------------- small dense linalg
# Unrolled for a static n (<= 32): O(n) row steps of vector work; enough for the
# covariance-sized matrices that appear inside models. Larger n stays an eager op.
_MAX_UNROLL = 32


def _tri_solve(a: torch.Tensor, b: torch.Tensor, upper: bool, unit: bool = False) -> torch.Tensor:
    """Solve A X = B for triangular A (..., n, n), B (..., n, k) by substitution."""
    n = a.shape[-1]
    if n == 0:
        return b.clone()
    a = a.expand(*torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]), n, n)
    rows: list[torch.Tensor | None] = [None] * n
    order = range(n - 1, -1, -1) if upper else range(n)
    for i in order:
        acc = b[..., i, :]
        done = list(range(i + 1, n) if upper else range(i))
        if done:
            xs = torch.stack([rows[j] for j in done], dim=-2)  # type: ignore[misc]
            acc = acc - (a[..., i, done].unsqueeze(-2) @ xs).squeeze(-2)
        rows[i] = acc if unit else acc / a[..., i, i : i + 1]
    return torch.stack(rows, dim=-2)  # type: ignore[arg-type]


def _cholesky(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, info) as LAPACK's potf2 leaves them: column j's pivot a_jj - |L[j, :j]|^2 must
    be positive (and not NaN); at the first one that is not, that value is stored on the
    diagonal, info = j + 1, and every later column keeps the input's values. The strict
    upper triangle is zero (ATen's tril_)."""
    n = a.shape[-1]
    info = torch.zeros(a.shape[:-2], dtype=torch.int32, device=a.device)
    if n == 0:
        return a.clone(), info
    rows = torch.arange(n, device=a.device)
    failed = torch.zeros(a.shape[:-2], dtype=torch.bool, device=a.device)
    cols: list[torch.Tensor] = []
    for j in range(n):
        prev = torch.stack(cols, dim=-1) if cols else None  # (..., n, j)
        diag = a[..., j, j]
        below = a[..., :, j]
        if prev is not None:
            diag = diag - (prev[..., j, :] ** 2).sum(-1)
            below = below - (prev @ prev[..., j, :].unsqueeze(-1)).squeeze(-1)
        ok = (diag > 0) & ~failed
        d = torch.sqrt(torch.where(ok, diag, 1.0))
        done = torch.where((rows > j) & ok.unsqueeze(-1), below / d.unsqueeze(-1), torch.zeros_like(below))
        done = torch.where(rows == j, d.unsqueeze(-1), done)
        kept = torch.where(rows > j, a[..., :, j], torch.zeros_like(below))  # untouched input column
        kept = torch.where((rows == j) & ~failed.unsqueeze(-1), diag.unsqueeze(-1),
                           torch.where(rows == j, a[..., :, j], kept))
        cols.append(torch.where(ok.unsqueeze(-1), done, kept))
        info = torch.where(~failed & ~ok, j + 1, info)
        failed = failed | ~ok
    return torch.stack(cols, dim=-1), info


def _small(a: torch.Tensor) -> bool:
    return a.dim() >= 2 and a.shape[-1] <= _MAX_UNROLL and a.dtype.is_floating_point


def _cholesky_ex(a: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    # upper reads only the upper triangle, as LAPACK does (the lower one may be anything)
    if upper:
        low, info = _cholesky(a.transpose(-2, -1))
        return low.transpose(-2, -1), info
    return _cholesky(a)


@_register(aten.cholesky.default)
def cholesky(a: torch.Tensor, upper: bool = False) -> Any:
    """Raises like eager on a matrix that is not positive definite: the check on info is
    lifted out of the graph by prepare and runs after the executable."""
    if not _small(a):
        return NotImplemented
    low, info = _cholesky_ex(a, upper)
    aten._linalg_check_errors(info, "cholesky", is_matrix=a.dim() == 2)
    return low


@_register(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(a: torch.Tensor, upper: bool = False, check_errors: bool = False) -> Any:
    """info as LAPACK reports it (first failing column, 1-based); with ``check_errors`` the
    check is traced as its own op (lifted out of the graph by prepare)."""
    if not _small(a):
        return NotImplemented
    low, info = _cholesky_ex(a, upper)
    if check_errors:
        aten._linalg_check_errors(info, "linalg.cholesky_ex", is_matrix=a.dim() == 2)
    return low, info


@_register(aten.cholesky_solve.default)
def cholesky_solve(b: torch.Tensor, l: torch.Tensor, upper: bool = False) -> Any:  # noqa: E741
    if not _small(l):
        return NotImplemented
    low = l.transpose(-2, -1) if upper else l
    y = _tri_solve(low, b, upper=False)
    return _tri_solve(low.transpose(-2, -1), y, upper=True)


@_register(aten.cholesky_inverse.default)
def cholesky_inverse(l: torch.Tensor, upper: bool = False) -> Any:  # noqa: E741
    if not _small(l):
        return NotImplemented
    eye = torch.eye(l.shape[-1], dtype=l.dtype, device=l.device).expand(l.shape)
    return cholesky_solve(eye, l, upper)


@_register(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(a: torch.Tensor, b: torch.Tensor, *, upper: bool, left: bool = True,
                            unitriangular: bool = False) -> Any:
    if not _small(a):
        return NotImplemented
    if left:
        return _tri_solve(a, b, upper, unitriangular)
    return _tri_solve(a.transpose(-2, -1), b.transpose(-2, -1), not upper,
                      unitriangular).transpose(-2, -1)


@_register(aten.triangular_solve.default)
def triangular_solve(b: torch.Tensor, a: torch.Tensor, upper: bool = True, transpose: bool = False,
                     unitriangular: bool = False) -> Any:
    if not _small(a):
        return NotImplemented
    m = a.transpose(-2, -1) if transpose else a
    return _tri_solve(m, b, upper != transpose, unitriangular), a.clone()
