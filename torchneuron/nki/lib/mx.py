"""An MXFP8 matmul for trn3 in the NKI dialect: ``a_t.T @ b`` with both operands quantized
to MXFP8 (E4M3 elements, one E8M0 scale per 32 elements along K) on the device.

Each 128-row K chunk of both operands is loaded and quantized once by ``nisa.quantize_mx``
(VectorE; the moving operand's quantized tiles stay in SBUF across output rows) and
multiplied by ``nisa.nc_matmul_mx`` at the MX rate (4x BF16 on NeuronCore-v4), the chunks
accumulating in fp32 PSUM; the result is written in the inputs' dtype.
"""

from __future__ import annotations

from typing import Any

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron.nki.kernel import jit

__all__ = ["mxfp8_matmul_kernel"]

_P = 128


@jit
def mxfp8_matmul_kernel(a_t: Any, b: Any) -> Any:
    """a_t [K, M], b [K, N] (K a multiple of 32; M, N multiples of 128 / 512 or smaller)."""
    k_dim, m_dim = a_t.shape
    n_dim = b.shape[1]
    out = nl.ndarray((m_dim, n_dim), dtype=a_t.dtype, buffer=nl.shared_hbm)
    mt, nt = min(_P, m_dim), min(512, n_dim)
    chunks = [slice(k * _P, min((k + 1) * _P, k_dim)) for k in range((k_dim + _P - 1) // _P)]
    b_q: dict[tuple[int, int], Any] = {}  # each operand tile is loaded and quantized once
    for m in nl.affine_range(m_dim // mt):
        a_q = [nisa.quantize_mx(nl.load(a_t[ks, m * mt:(m + 1) * mt])) for ks in chunks]
        for n in nl.affine_range(n_dim // nt):
            acc = nl.zeros((mt, nt), dtype=nl.float32, buffer=nl.psum)
            for k, ks in enumerate(chunks):
                if (k, n) not in b_q:
                    b_q[k, n] = nisa.quantize_mx(nl.load(b[ks, n * nt:(n + 1) * nt]))
                (aq, a_scale), (bq, b_scale) = a_q[k], b_q[k, n]
                acc += nisa.nc_matmul_mx(aq, bq, a_scale, b_scale)
            nl.store(out[m * mt:(m + 1) * mt, n * nt:(n + 1) * nt],
                     value=nl.copy(acc, dtype=a_t.dtype))
    return out
