"""Householder QR as LAPACK computes it (geqr2, org2r, orm2r), for small matrices.

Torch-MLIR has no lowering for ``geqrf``, ``linalg_qr``, ``linalg_householder_product`` or
``ormqr``. LAPACK's unblocked QR (what geqrf runs below its block size) is a fixed
sequence: for column i, dlarfg makes the reflector H = I - tau v v^T with v = [1; x] that
maps (alpha, x) to (beta, 0), beta = -sign(alpha) * ||(alpha, x)||, tau = (beta - alpha) /
beta, x scaled by 1 / (alpha - beta) (nothing when x is zero: tau = 0); then H is applied
to the trailing columns. Q = H_0 H_1 ... H_(k-1). The same steps unrolled (min(m, n) <= 32)
give LAPACK's sign convention and numbers to rounding; larger matrices stay eager.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.lu import fits_unrolled as _fits
from torchneuron.compiler.decomp.registry import registrar

__all__ = ["QR_DECOMPOSITIONS"]

aten = torch.ops.aten
QR_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}


_register = registrar(QR_DECOMPOSITIONS)



def _reflector(a: torch.Tensor, i: int) -> torch.Tensor:
    """v_i (..., m): zeros above row i, 1 at row i, the stored x below."""
    m = a.shape[-2]
    rows = torch.arange(m, device=a.device)
    col = a[..., :, i]
    return torch.where(rows > i, col, torch.where(rows == i, 1.0, 0.0).to(a.dtype))


def _geqrf(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = a.shape[-2], a.shape[-1]
    rows = torch.arange(m, device=a.device)
    cols = torch.arange(n, device=a.device)
    taus = []
    for i in range(min(m, n)):
        alpha = a[..., i, i]
        x = torch.where(rows > i, a[..., :, i], 0.0)
        xnorm = torch.linalg.vector_norm(x, dim=-1)
        norm = torch.sqrt(alpha * alpha + xnorm * xnorm)
        beta = -torch.where(alpha >= 0, norm, -norm)
        nonzero = xnorm != 0
        tau = torch.where(nonzero, (beta - alpha) / beta, 0.0)
        scale = torch.where(nonzero, 1 / (alpha - torch.where(nonzero, beta, alpha - 1)), 1.0)
        newcol = torch.where(rows > i, x * scale.unsqueeze(-1),
                             torch.where(rows == i, torch.where(nonzero, beta, alpha).unsqueeze(-1),
                                         a[..., :, i]))
        a = torch.where(cols == i, newcol.unsqueeze(-1), a)
        v = _reflector(a, i)
        # H applied from the left to the trailing columns: A -= tau v (v^T A)
        w = (v.unsqueeze(-2) @ a).squeeze(-2)  # (..., n)
        upd = a - tau[..., None, None] * v.unsqueeze(-1) * w.unsqueeze(-2)
        a = torch.where(cols > i, upd, a)
        taus.append(tau)
    tau_t = (torch.stack(taus, dim=-1) if taus
             else torch.zeros(*a.shape[:-2], 0, dtype=a.dtype, device=a.device))
    return a, tau_t


def _apply(a: torch.Tensor, tau: torch.Tensor, c: torch.Tensor, left: bool, transpose: bool
           ) -> torch.Tensor:
    """C multiplied by Q = H_0 ... H_(k-1) (Q^T with ``transpose``) from the left/right."""
    k = tau.shape[-1]
    forward = left == transpose  # Q^T C = H_(k-1)...H_0 C: H_0 first; C Q: H_0 first
    for i in (range(k) if forward else range(k - 1, -1, -1)):
        v = _reflector(a, i)
        t = tau[..., i, None, None]
        if left:
            c = c - t * v.unsqueeze(-1) * (v.unsqueeze(-2) @ c)
        else:
            c = c - t * (c @ v.unsqueeze(-1)) * v.unsqueeze(-2)
    return c


def _householder_product(a: torch.Tensor, tau: torch.Tensor, cols: int) -> torch.Tensor:
    """The first ``cols`` columns of H_0 ... H_(k-1) (LAPACK's orgqr)."""
    m = a.shape[-2]
    eye = torch.eye(m, cols, dtype=a.dtype, device=a.device)
    eye = eye.expand(*torch.broadcast_shapes(a.shape[:-2], tau.shape[:-1]), m, cols)
    return _apply(a, tau, eye, left=True, transpose=False)


@_register(aten.geqrf.default)
def geqrf(a: torch.Tensor) -> Any:
    if not _fits(a):
        return NotImplemented
    return _geqrf(a)


@_register(aten.linalg_householder_product.default)
def householder_product(a: torch.Tensor, tau: torch.Tensor) -> Any:
    if not _fits(a):
        return NotImplemented
    return _householder_product(a, tau, a.shape[-1])


@_register(aten.ormqr.default)
def ormqr(a: torch.Tensor, tau: torch.Tensor, c: torch.Tensor, left: bool = True,
          transpose: bool = False) -> Any:
    if not _fits(a):
        return NotImplemented
    return _apply(a, tau, c, left, transpose)


@_register(aten.linalg_qr.default)
def linalg_qr(a: torch.Tensor, mode: str = "reduced") -> Any:
    """geqrf, then Q from the reflectors (m x k, or m x m in "complete"; empty in "r")
    and R the upper triangle (k or m rows)."""
    if not _fits(a) or mode not in ("reduced", "complete", "r"):
        return NotImplemented
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    qr, tau = _geqrf(a)
    if mode == "r":
        return a.new_empty(0), torch.triu(qr[..., :k, :])
    if mode == "complete":
        return _householder_product(qr, tau, m), torch.triu(qr)
    return _householder_product(qr, tau, k), torch.triu(qr[..., :k, :])
