"""FlashAttention forward in the NKI dialect: softmax(q k^T * scale) v, tiled so SBUF holds it.

Per (batch x head) slice, K is transposed once into ``kT`` [D, S] and V kept as 128-row
tiles, both in SBUF (about 4 * S bytes per partition in bf16: 16 KiB at S = 4096). Then
for each block of 128 queries:

- ``qT`` [D, 128] (the scale folded in) is the stationary operand; scores for 512 keys at
  a time are one ``nc_matmul`` into a PSUM bank (moving free size 512);
- the online softmax keeps the running row max ``m``, row sum ``l`` and the fp32 output
  accumulator in SBUF; ``exp(s - m)`` is one ScalarE activation with a per-partition bias;
- ``P V`` transposes P in 128x128 blocks on TensorE and accumulates ``nc_matmul(pT, v)``
  in PSUM;
- causal: key blocks entirely above the diagonal are skipped; the diagonal block is
  masked by a select on VectorE.

It also returns the log-sum-exp of each row (``m + log l``), what a backward pass needs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron.nki.kernel import jit

__all__ = ["flash_attention_bwd_kernel", "flash_attention_fwd_kernel"]

_P = 128  # queries per block, keys per transpose / PV block
_KB = 512  # keys per score block (one PSUM bank of fp32)
_NEG = -30000.0  # masked scores: exp underflows to 0 in fp32, as -inf does


@jit
def flash_attention_fwd_kernel(q: Any, k: Any, v: Any, causal: bool = False,
                               scale: float | None = None) -> Any:
    """q, k, v [BH, S, D] (S a multiple of 128, D <= 128) -> (out [BH, S, D], lse [BH, S])."""
    bh, s, d = q.shape
    sk = k.shape[1]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    out = nl.ndarray((bh, s, d), dtype=q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((bh, s), dtype=nl.float32, buffer=nl.shared_hbm)
    kb = min(_KB, sk)
    for h in nl.affine_range(bh):
        kT = nl.ndarray((d, sk), dtype=k.dtype)
        v_tiles = []
        for j in nl.affine_range(sk // _P):
            rows = slice(j * _P, (j + 1) * _P)
            kT[:, rows] = nl.copy(nisa.nc_transpose(nl.load(k[h, rows, :])), dtype=k.dtype)
            v_tiles.append(nl.load(v[h, rows, :]))
        for i in nl.affine_range(s // _P):
            q0 = i * _P
            qt = nl.multiply(nl.load(q[h, q0:q0 + _P, :]), scale, dtype=q.dtype)
            qT = nl.copy(nisa.nc_transpose(qt), dtype=q.dtype)
            m = nl.full((_P, 1), _NEG, dtype=nl.float32)
            l_sum = nl.zeros((_P, 1), dtype=nl.float32)
            acc = nl.zeros((_P, d), dtype=nl.float32)
            last = sk if not causal else min(sk, q0 + _P)
            for j in nl.sequential_range((last + kb - 1) // kb):
                k0 = j * kb
                width = min(kb, sk - k0)
                scores = nisa.nc_matmul(qT, kT[:, k0:k0 + width])
                sc = nl.copy(scores)
                if causal and k0 + width > q0:
                    i_q = q0 + np.arange(_P)[:, None]
                    i_k = k0 + np.arange(width)[None, :]
                    sc = nl.where(i_k <= i_q, sc, _NEG)
                m_new = nl.maximum(m, nl.max(sc, axis=1, keepdims=True))
                neg_m = nl.negative(m_new)
                p = nisa.activation(nl.exp, sc, bias=neg_m, dtype=nl.float32)
                alpha = nisa.activation(nl.exp, m, bias=neg_m, dtype=nl.float32)
                l_sum = nl.add(nl.multiply(l_sum, alpha), nl.sum(p, axis=1, keepdims=True))
                acc = nisa.tensor_scalar(acc, nl.multiply, alpha)
                pv = nl.zeros((_P, d), dtype=nl.float32, buffer=nl.psum)
                p_lo = nl.copy(p, dtype=v.dtype)
                for c in nl.affine_range(width // _P):
                    pT = nl.copy(nisa.nc_transpose(p_lo[:, c * _P:(c + 1) * _P]), dtype=v.dtype)
                    pv += nisa.nc_matmul(pT, v_tiles[(k0 // _P) + c])
                acc = nl.add(acc, pv)
                m = m_new
            inv = nl.reciprocal(l_sum)
            nl.store(out[h, q0:q0 + _P, :], value=nisa.tensor_scalar(acc, nl.multiply, inv,
                                                                     dtype=q.dtype))
            nl.store(lse[h, q0:q0 + _P], value=nl.add(m, nl.log(l_sum)))
    return out, lse


@jit
def flash_attention_bwd_kernel(q: Any, k: Any, v: Any, o: Any, do: Any, lse: Any,
                               causal: bool = False, scale: float | None = None) -> Any:
    """Gradients (dq, dk, dv) of the forward above, recomputing P block by block from lse.

    Per 128x128 block: ``P = exp(s - lse)``, ``dV += P^T dO``, ``dP = dO V^T``,
    ``dS = P * (dP - rowsum(dO * O))``, ``dQ += dS K * scale``, ``dK += dS^T Q * scale``;
    dK and dV accumulate in fp32 SBUF tiles per key block, dQ per query block.
    """
    bh, s, d = q.shape
    sk = k.shape[1]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    dq = nl.ndarray((bh, s, d), dtype=q.dtype, buffer=nl.shared_hbm)
    dk = nl.ndarray((bh, sk, d), dtype=k.dtype, buffer=nl.shared_hbm)
    dv = nl.ndarray((bh, sk, d), dtype=v.dtype, buffer=nl.shared_hbm)
    for h in nl.affine_range(bh):
        k_t, kT, vT = [], [], []
        dk_acc, dv_acc = [], []
        for j in nl.affine_range(sk // _P):
            rows = slice(j * _P, (j + 1) * _P)
            kj = nl.load(k[h, rows, :])
            k_t.append(kj)
            kT.append(nl.copy(nisa.nc_transpose(kj), dtype=k.dtype))
            vT.append(nl.copy(nisa.nc_transpose(nl.load(v[h, rows, :])), dtype=v.dtype))
            dk_acc.append(nl.zeros((_P, d), dtype=nl.float32))
            dv_acc.append(nl.zeros((_P, d), dtype=nl.float32))
        for i in nl.affine_range(s // _P):
            q0 = i * _P
            qi = nl.load(q[h, q0:q0 + _P, :])
            qT = nl.copy(nisa.nc_transpose(nl.multiply(qi, scale, dtype=q.dtype)), dtype=q.dtype)
            doi = nl.load(do[h, q0:q0 + _P, :])
            doT = nl.copy(nisa.nc_transpose(doi), dtype=do.dtype)
            delta = nl.sum(nl.multiply(doi, nl.load(o[h, q0:q0 + _P, :]), dtype=nl.float32),
                           axis=1, keepdims=True)
            neg_lse = nl.negative(nl.load(lse[h, q0:q0 + _P].reshape((_P, 1))))
            dq_acc = nl.zeros((_P, d), dtype=nl.float32)
            last = sk if not causal else min(sk, q0 + _P)
            for j in nl.sequential_range(last // _P):
                k0 = j * _P
                p = nisa.activation(nl.exp, nisa.nc_matmul(qT, kT[j]), bias=neg_lse,
                                    dtype=nl.float32)
                if causal and k0 + _P > q0:
                    keep = (k0 + np.arange(_P)[None, :]) <= (q0 + np.arange(_P)[:, None])
                    p = nl.where(keep, p, 0.0)
                p_lo = nl.copy(p, dtype=q.dtype)
                dv_acc[j] = nl.add(dv_acc[j], nisa.nc_matmul(p_lo, doi))
                dp = nisa.nc_matmul(doT, vT[j])
                ds = nl.multiply(p, nisa.tensor_scalar(dp, nl.subtract, delta), dtype=q.dtype)
                dsT = nl.copy(nisa.nc_transpose(ds), dtype=q.dtype)
                dq_acc = nl.add(dq_acc, nisa.nc_matmul(dsT, k_t[j]))
                dk_acc[j] = nl.add(dk_acc[j], nisa.nc_matmul(ds, qi))
            nl.store(dq[h, q0:q0 + _P, :], value=nl.multiply(dq_acc, scale, dtype=q.dtype))
        for j in nl.affine_range(sk // _P):
            rows = slice(j * _P, (j + 1) * _P)
            nl.store(dk[h, rows, :], value=nl.multiply(dk_acc[j], scale, dtype=k.dtype))
            nl.store(dv[h, rows, :], value=nl.copy(dv_acc[j], dtype=v.dtype))
    return dq, dk, dv
