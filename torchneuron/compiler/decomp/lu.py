"""LU factorization with partial pivoting, and what ATen builds on it (det, slogdet,
solve, inverse, lu_solve, lu_unpack), for small matrices.

Torch-MLIR has no lowering for any LAPACK call. LAPACK's getrf is a fixed algorithm:
for each column, the first row of largest magnitude becomes the pivot (isamax), rows are
swapped, the column below is divided by the pivot and the trailing block takes the rank-1
update; a zero pivot column is left unscaled and recorded in ``info``. The same steps are
unrolled here for a static size (min(m, n) <= 32), so results agree with eager to float32
rounding (and pivots agree unless two candidates tie to rounding). Larger matrices, and
calls that must raise on a singular input (``check_errors``), stay eager ops.

ATen factors A^T instead of A in some entries (a row-major A is a column-major A^T, so
LAPACK needs no copy): det and slogdet when A is contiguous, solve when A is column-major.
The LU and pivots these return (kept for backward) follow the same rule here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["LU_DECOMPOSITIONS"]

aten = torch.ops.aten
LU_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
MAX_UNROLL = 32


_register = registrar(LU_DECOMPOSITIONS)


def fits_unrolled(a: torch.Tensor) -> bool:
    """A float matrix (batch) small enough to unroll a factorization over (LU, QR)."""
    return (a.dim() >= 2 and a.dtype in (torch.float32, torch.float64)
            and min(a.shape[-2], a.shape[-1]) <= MAX_UNROLL)


def _swap_rows(a: torch.Tensor, j: int, p: torch.Tensor) -> torch.Tensor:
    """Rows j and p (a per-batch index tensor) of a (..., m, n) exchanged."""
    m, n = a.shape[-2], a.shape[-1]
    rows = torch.arange(m, device=a.device).reshape(m, 1)
    idx = p.reshape(*p.shape, 1, 1)
    row_p = torch.gather(a, -2, idx.expand(*a.shape[:-2], 1, n))
    row_j = a[..., j: j + 1, :]
    return torch.where(rows == j, row_p, torch.where(rows == idx, row_j, a))


def _lu(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(LU, pivots as LAPACK's 1-based int32 ipiv, info int32) of a (..., m, n)."""
    m, n = a.shape[-2], a.shape[-1]
    batch = a.shape[:-2]
    rows = torch.arange(m, device=a.device)
    cols = torch.arange(n, device=a.device)
    info = torch.zeros(batch, dtype=torch.int32, device=a.device)
    pivots = []
    for j in range(min(m, n)):
        p = torch.argmax(torch.abs(a[..., j:, j]), dim=-1) + j
        a = _swap_rows(a, j, p)
        piv = a[..., j, j]
        zero = (piv == 0).unsqueeze(-1)
        below = rows > j
        scaled = torch.where(zero | ~below, 0.0, a[..., :, j] / torch.where(zero, 1.0, piv.unsqueeze(-1)))
        urow = a[..., j, :]
        update = below.unsqueeze(-1) & (cols > j)
        a = torch.where(update, a - scaled.unsqueeze(-1) * urow.unsqueeze(-2), a)
        a = torch.where(below.unsqueeze(-1) & (cols == j), scaled.unsqueeze(-1), a)
        info = torch.where((info == 0) & (piv == 0), j + 1, info)
        pivots.append((p + 1).to(torch.int32))
    piv_t = (torch.stack(pivots, dim=-1) if pivots
             else torch.zeros(*batch, 0, dtype=torch.int32, device=a.device))
    return a, piv_t, info


def _apply_pivots(b: torch.Tensor, pivots: torch.Tensor, reverse: bool = False) -> torch.Tensor:
    """LAPACK's laswp: row j of b exchanged with row pivots[j] - 1, in order (or reverse)."""
    k = pivots.shape[-1]
    p = (pivots.to(torch.int64) - 1).expand(*b.shape[:-2], k)
    for j in (range(k - 1, -1, -1) if reverse else range(k)):
        b = _swap_rows(b, j, p[..., j])
    return b


def _perm_sign(pivots: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    k = pivots.shape[-1]
    swaps = (pivots != torch.arange(1, k + 1, device=pivots.device, dtype=pivots.dtype)).sum(-1)
    return torch.where(swaps % 2 == 1, -1.0, 1.0).to(dtype)


def _lu_solve(lu: torch.Tensor, pivots: torch.Tensor, b: torch.Tensor, left: bool,
              adjoint: bool) -> torch.Tensor:
    """getrs: solve A X = B (A^T X = B with ``adjoint``; X A = B when not ``left``)."""
    from torchneuron.compiler.decomp.cholesky import _tri_solve

    if not left:  # X A = B  <=>  A^T X^T = B^T
        return _lu_solve(lu, pivots, b.mT, True, not adjoint).mT
    shape = torch.broadcast_shapes(lu.shape[:-2], b.shape[:-2])
    lu = lu.expand(*shape, *lu.shape[-2:])
    b = b.expand(*shape, *b.shape[-2:])
    pivots = pivots.expand(*shape, pivots.shape[-1])
    if not adjoint:
        y = _apply_pivots(b, pivots)
        y = _tri_solve(lu, y, upper=False, unit=True)
        return _tri_solve(lu, y, upper=True)
    y = _tri_solve(lu.mT, b, upper=False)
    y = _tri_solve(lu.mT, y, upper=True, unit=True)
    return _apply_pivots(y, pivots, reverse=True)


@_register(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(a: torch.Tensor, pivot: bool = True, check_errors: bool = False) -> Any:
    if not fits_unrolled(a) or not pivot or check_errors:
        return NotImplemented
    return _lu(a)


@_register(aten._linalg_det.default)
def linalg_det(a: torch.Tensor) -> Any:
    """(det, LU, pivots): prod(diag U) times the permutation's sign; A^T factored when A
    is contiguous, as ATen does."""
    if not fits_unrolled(a):
        return NotImplemented
    lu, pivots, _ = _lu(a.mT if a.is_contiguous() else a)
    det = torch.diagonal(lu, 0, -2, -1).prod(-1) * _perm_sign(pivots, a.dtype)
    return det, lu, pivots


@_register(aten.linalg_det.default)
def linalg_det_only(a: torch.Tensor) -> Any:
    if not fits_unrolled(a):
        return NotImplemented
    return linalg_det(a)[0]


@_register(aten._linalg_slogdet.default)
def linalg_slogdet(a: torch.Tensor) -> Any:
    """(sign, log|det|, LU, pivots): sgn(diag U).prod() times the permutation's sign and
    sum log|diag U| (-inf and sign 0 for a singular matrix)."""
    if not fits_unrolled(a):
        return NotImplemented
    lu, pivots, _ = _lu(a.mT if a.is_contiguous() else a)
    diag = torch.diagonal(lu, 0, -2, -1)
    sign = torch.sign(diag).prod(-1) * _perm_sign(pivots, a.dtype)
    return sign, torch.log(torch.abs(diag)).sum(-1), lu, pivots


def _is_vector_rhs(a: torch.Tensor, b: torch.Tensor) -> bool:
    return b.dim() == 1 or (a.dim() - 1 == b.dim() and tuple(b.shape) == tuple(a.shape[:-1]))


@_register(aten._linalg_solve_ex.default)
def linalg_solve_ex(a: torch.Tensor, b: torch.Tensor, left: bool = True,
                    check_errors: bool = False) -> Any:
    """(X, LU, pivots, info) of A X = B (X A = B when not ``left``); a column-major A is
    factored as A^T and solved with the adjoint, as ATen does."""
    if not fits_unrolled(a) or check_errors or a.shape[-1] != a.shape[-2]:
        return NotImplemented
    vector = _is_vector_rhs(a, b)
    rhs = b.unsqueeze(-1) if vector else b
    use_t = a.mT.is_contiguous() and not a.is_contiguous()
    lu, pivots, info = _lu(a.mT if use_t else a)
    x = _lu_solve(lu, pivots, rhs, left, use_t)
    return (x.squeeze(-1) if vector else x), lu, pivots, info


@_register(aten.linalg_inv_ex.default)
def linalg_inv_ex(a: torch.Tensor, check_errors: bool = False) -> Any:
    if not fits_unrolled(a) or check_errors or a.shape[-1] != a.shape[-2]:
        return NotImplemented
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand(a.shape)
    x, _, _, info = linalg_solve_ex(a, eye)
    return x, info


@_register(aten.linalg_lu_solve.default)
def linalg_lu_solve(lu: torch.Tensor, pivots: torch.Tensor, b: torch.Tensor, *, left: bool = True,
                    adjoint: bool = False) -> Any:
    if not fits_unrolled(lu) or lu.shape[-1] != lu.shape[-2]:
        return NotImplemented
    return _lu_solve(lu, pivots, b, left, adjoint)


def _unpack(lu: torch.Tensor, pivots: torch.Tensor, unpack_data: bool, unpack_pivots: bool
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """P, L, U with A = P L U: P from the row swaps applied to the identity."""
    m, n = lu.shape[-2], lu.shape[-1]
    k = min(m, n)
    empty = lu.new_empty(0)
    if unpack_pivots:
        eye = torch.eye(m, dtype=lu.dtype, device=lu.device).expand(*pivots.shape[:-1], m, m)
        perm = _apply_pivots(eye, pivots)  # P^T = the rows of I in pivoted order
        p = perm.mT
    else:
        p = empty
    if not unpack_data:
        return p, empty, empty
    low = torch.tril(lu[..., :, :k], -1) + torch.eye(m, k, dtype=lu.dtype, device=lu.device)
    up = torch.triu(lu[..., :k, :])
    return p, low, up


@_register(aten.lu_unpack.default)
def lu_unpack(lu: torch.Tensor, pivots: torch.Tensor, unpack_data: bool = True,
              unpack_pivots: bool = True) -> Any:
    if not fits_unrolled(lu):
        return NotImplemented
    return _unpack(lu, pivots, unpack_data, unpack_pivots)


@_register(aten.linalg_lu.default)
def linalg_lu(a: torch.Tensor, pivot: bool = True) -> Any:
    if not fits_unrolled(a) or not pivot:
        return NotImplemented
    lu, pivots, _ = _lu(a)
    return _unpack(lu, pivots, True, True)
