"""RMSNorm, LayerNorm and softmax over the last dimension, written in the NKI dialect.

Layout: rows on partitions in tiles of 128, the normalized dimension on the free axis,
so each statistic is a free-axis reduction on VectorE and each row's scale a per-partition
scalar (``[P, 1]``). Statistics are computed in fp32 whatever the input dtype; the weight
row is loaded once into all 128 partitions (a stride-0 DMA).
"""

from __future__ import annotations

from typing import Any

import torchneuron.nki.isa as nisa
import torchneuron.nki.language as nl
from torchneuron.nki.kernel import jit

__all__ = ["layer_norm_kernel", "rms_norm_kernel", "softmax_kernel"]

_P = 128


def _rows(n: int) -> list[slice]:
    return [slice(i * _P, min((i + 1) * _P, n)) for i in range((n + _P - 1) // _P)]


@jit
def rms_norm_kernel(x: Any, weight: Any, eps: float = 1e-6) -> Any:
    """``x * rsqrt(mean(x**2, -1) + eps) * weight`` for x [N, D], weight [D]."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    w = nl.load(weight.reshape((1, d)).broadcast_to((_P, d)), dtype=nl.float32)
    for rows in _rows(n):
        p = rows.stop - rows.start
        t = nl.load(x[rows, :])
        ms = nl.mean(nl.square(t, dtype=nl.float32), axis=1, keepdims=True)
        r = nl.rsqrt(nl.add(ms, eps))
        y = nisa.tensor_scalar(t, nl.multiply, r, dtype=nl.float32)
        nl.store(out[rows, :], value=nl.multiply(y, w[0:p, :], dtype=x.dtype))
    return out


@jit
def layer_norm_kernel(x: Any, weight: Any, bias: Any, eps: float = 1e-5) -> Any:
    """``(x - mean) * rsqrt(var + eps) * weight + bias`` over the last dim (biased var)."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    w = nl.load(weight.reshape((1, d)).broadcast_to((_P, d)), dtype=nl.float32)
    b = nl.load(bias.reshape((1, d)).broadcast_to((_P, d)), dtype=nl.float32)
    for rows in _rows(n):
        p = rows.stop - rows.start
        t = nl.load(x[rows, :], dtype=nl.float32)
        mu = nl.mean(t, axis=1, keepdims=True)
        c = nisa.tensor_scalar(t, nl.subtract, mu)
        var = nl.mean(nl.square(c), axis=1, keepdims=True)
        r = nl.rsqrt(nl.add(var, eps))
        y = nl.multiply(nisa.tensor_scalar(c, nl.multiply, r), w[0:p, :])
        nl.store(out[rows, :], value=nl.add(y, b[0:p, :], dtype=x.dtype))
    return out


@jit
def softmax_kernel(x: Any) -> Any:
    """Softmax over the last dim of x [N, D]: max, exp(x - max) on ScalarE, 1/sum."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    for rows in _rows(n):
        t = nl.load(x[rows, :])
        neg_max = nisa.tensor_reduce(nl.maximum, t, axis=1, negate=True, keepdims=True,
                                     dtype=nl.float32)
        e = nisa.activation(nl.exp, t, bias=neg_max, dtype=nl.float32)
        inv = nl.reciprocal(nl.sum(e, axis=1, keepdims=True))
        nl.store(out[rows, :], value=nisa.tensor_scalar(e, nl.multiply, inv, dtype=x.dtype))
    return out
