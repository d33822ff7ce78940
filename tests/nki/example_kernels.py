"""Kernels the NKI tests share: the issue's add, tiled add and matmul, written in the dialect."""

from __future__ import annotations

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron import nki


@nki.jit
def add_kernel(a, b):
    """The issue's example: rows in tiles of 128, whole rows on the free axis."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128:(i + 1) * 128, :])
        y = nl.load(b[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(x, y))
    return out


@nki.jit
def tiled_add_kernel(a, b, fmax=512):
    """Tiles on both axes; a ragged last tile on each axis (Python slicing clips)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows, cols = a.shape
    for i in nl.affine_range((rows + 127) // 128):
        for j in nl.affine_range((cols + fmax - 1) // fmax):
            r, c = slice(i * 128, (i + 1) * 128), slice(j * fmax, (j + 1) * fmax)
            nl.store(out[r, c], value=nl.load(a[r, c]) + nl.load(b[r, c]))
    return out


@nki.jit
def matmul_kernel(a_t, b):
    """``a_t.T @ b`` for a_t [K, M], b [K, N]: K accumulated in PSUM in 128-row chunks."""
    k_dim, m_dim = a_t.shape
    n_dim = b.shape[1]
    out = nl.ndarray((m_dim, n_dim), dtype=a_t.dtype, buffer=nl.shared_hbm)
    n_tile = min(512, n_dim)
    for m in nl.affine_range(m_dim // 128):
        for n in nl.affine_range(n_dim // n_tile):
            acc = nl.zeros((128, n_tile), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_dim // 128):
                lhs = nl.load(a_t[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                rhs = nl.load(b[k * 128:(k + 1) * 128, n * n_tile:(n + 1) * n_tile])
                acc += nisa.nc_matmul(lhs, rhs)
            nl.store(out[m * 128:(m + 1) * 128, n * n_tile:(n + 1) * n_tile],
                     value=nl.copy(acc, dtype=a_t.dtype))
    return out


@nki.jit
def nl_matmul_kernel(a, b):
    """``a @ b`` for one 128x128 by 128x512 tile pair with ``nl.matmul`` (transpose inside)."""
    out = nl.ndarray((a.shape[0], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.matmul(nl.load(a), nl.load(b))
    nl.store(out, value=nl.copy(res))
    return out
