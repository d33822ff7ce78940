"""FFTs as real matmuls, for a device with no FFT unit and no complex dtype.

Torch-MLIR has no lowering for ``_fft_r2c`` / ``_fft_c2c`` / ``_fft_c2r`` and the neuron
stack has no complex dtype. A DFT along one dim is a matmul by a constant matrix of
cosines and sines, which is what Trainium's TensorEngine (a matmul engine) would run
too; a multi-dim FFT is one such matmul per dim. The matrices are computed in float64 on
the host (angles reduced exactly: ``2*pi*((k*n) mod N)/N``, so no large-argument
rounding) and only then cast to the input's dtype, with the normalization folded in.

Complex values are real pairs (trailing dim 2, decomp/complex.py); the interleaved
(re, im) rows make a complex-by-complex DFT one real matmul by a 2N x 2N matrix
([[c, s], [-s, c]] blocks).

Precision and size: a DFT of n points by an fp32 matmul sums n products, so its error
grows with n (pocketfft's grows like log n), and its matrix holds (2n)^2 constants. Up
to ``DIRECT_SIZE`` points a transform is one matmul; a longer one of composite length
is split in two stages (Cooley-Tukey: short matmuls, a twiddle, short matmuls), whose
constants and error grow with n1 + n2 instead. Measured against eager (random normal
input, tests/compiler/test_fft.py and the report of issue 7): at n = 16384 the worst
element uses 6% of the sweep's tolerance (rtol 1e-3, atol 1e-4), at 65536 75%, so two
stages stop at ``MAX_FFT_SIZE`` = 16384; a prime length stays one matmul, up to
``MAX_DFT_SIZE`` = 2048. Longer transforms are refused (``fft-too-large``) and run
eagerly.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from torchneuron.compiler.decomp.complex import (
    COMPLEX_DECOMPOSITIONS,
    COMPLEX_OWNERS,
    from_pairs,
    in_eager_layout,
    pairs,
)
from torchneuron.compiler.decomp.registry import registrar
from torchneuron.compiler.errors import PrepareError

__all__ = ["FFT_DECOMPOSITIONS", "MAX_DFT_SIZE", "MAX_FFT_SIZE", "fft_decompositions",
           "refuse_unlowered_ffts"]

aten = torch.ops.aten
FFT_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(FFT_DECOMPOSITIONS, filed=COMPLEX_OWNERS)  # one layer with complex

# Transforms of up to DIRECT_SIZE points are one DFT matmul; longer ones of composite
# length are split in two stages (recursively), up to MAX_FFT_SIZE points; a longer
# prime length is one matmul up to MAX_DFT_SIZE (its matrix holds (2n)^2 constants:
# 64 MiB of fp32 at 2048, and its error grows with n). Longer transforms run eagerly.
DIRECT_SIZE = 256
MAX_DFT_SIZE = 2048
MAX_FFT_SIZE = 1 << 14


def fft_decompositions(table: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """``FFT_DECOMPOSITIONS`` and ``COMPLEX_DECOMPOSITIONS`` for ``table``: their entries
    rewrite only complex values (returning NotImplemented on real ones), so where
    ``table`` already had an entry for the op (``sgn``, ``new_zeros``, ``slice_scatter``,
    ``polar``...), real values still go to it."""
    out: dict[Any, Callable[..., Any]] = {}
    for op, fn in {**COMPLEX_DECOMPOSITIONS, **FFT_DECOMPOSITIONS}.items():
        fn = functools.partial(in_eager_layout, op, fn, op in FFT_DECOMPOSITIONS)
        prev = table.get(op)
        out[op] = fn if prev is None else functools.partial(_chained, fn, prev)
    return out


def refuse_unlowered_ffts(gm: Any) -> None:
    """Refuse (``fft-too-large``) an FFT op left in the traced graph because a transform
    is longer than this compiler lowers: the decompositions return NotImplemented there
    instead of raising, since an error raised while AOTAutograd traces is not a refusal
    but a failed torch.compile."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in FFT_DECOMPOSITIONS:
            continue
        x = node.args[0].meta.get("val") if hasattr(node.args[0], "meta") else None
        if not isinstance(x, torch.Tensor):
            continue
        dims = _dims(x, node.args[1])
        sizes = [x.shape[d] for d in dims]
        if node.target is aten._fft_c2r.default and dims:
            sizes[-1] = node.args[3]
        for n in sizes:
            _check_size(str(node.target), n)


def _chained(fn: Callable[..., Any], prev: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    r = fn(*args, **kwargs)
    return prev(*args, **kwargs) if r is NotImplemented else r


# --------------------------------------------------------------------------- matrices


def _angles(n_in: int, n_out: int, size: int) -> np.ndarray:
    """2*pi*k*t/size for t < n_in (rows), k < n_out (columns), in float64, with k*t
    reduced mod size in integers first, so the angle is exact to one rounding."""
    t = np.arange(n_in, dtype=np.int64)[:, None]
    k = np.arange(n_out, dtype=np.int64)[None, :]
    return (t * k % size).astype(np.float64) * (2 * math.pi / size)


def _cos_sin(n_in: int, n_out: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    a = _angles(n_in, n_out, size)
    c, s = np.cos(a), np.sin(a)
    # cos(pi/2), sin(pi): exact zeros (every true nonzero entry is >= sin(2pi/size))
    c[np.abs(c) < 1e-12] = 0.0
    s[np.abs(s) < 1e-12] = 0.0
    return c, s


def _scale(normalization: int, size: int) -> float:
    """ATen's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n (per transformed dim)."""
    return (1.0, 1.0 / math.sqrt(size), 1.0 / size)[normalization]


def _r2c_matrix(n: int, n_out: int, normalization: int) -> np.ndarray:
    """(n, 2*n_out): real x (.., n) @ W = interleaved (re, im) of sum_t x_t e^{-2pi i kt/n}."""
    c, s = _cos_sin(n, n_out, n)
    w = np.stack([c, -s], axis=-1).reshape(n, 2 * n_out)
    return w * _scale(normalization, n)


def _c2c_matrix(n: int, forward: bool, normalization: int) -> np.ndarray:
    """(2n, 2n) acting on interleaved (re, im): out_k = sum_t x_t e^{-+2pi i kt/n}."""
    c, s = _cos_sin(n, n, n)
    s = -s if forward else s  # the twiddle c + i s
    re_row = np.stack([c, s], axis=-1)  # row 2t: x_re contributes (c, s)
    im_row = np.stack([-s, c], axis=-1)  # row 2t+1: x_im contributes (-s, c)
    w = np.stack([re_row, im_row], axis=1).reshape(2 * n, 2 * n)
    return w * _scale(normalization, n)


def _twiddle(n1: int, n2: int, forward: bool, normalization: int) -> np.ndarray:
    """(n1, n2, 2): e^{-+2pi i k1 t2 / n} for n = n1 * n2, times the normalization of n."""
    n = n1 * n2
    c, s = _cos_sin(n1, n2, n)
    return np.stack([c, -s if forward else s], axis=-1) * _scale(normalization, n)


def _c2r_matrix(n_in: int, n: int, normalization: int) -> np.ndarray:
    """(2*n_in, n): interleaved half spectrum -> the real signal of length n, using
    Hermitian symmetry as pocketfft does: X_0 and (even n) X_{n/2} count once and
    their imaginary parts are ignored, the others count twice (rows past n/2: zero)."""
    c, s = _cos_sin(n_in, n, n)
    k = np.arange(n_in)[:, None]
    edge = (k == 0) | ((n % 2 == 0) & (k == n // 2))
    weight = np.where(k <= n // 2, np.where(edge, 1.0, 2.0), 0.0)
    w = np.stack([c * weight, np.where(edge, 0.0, -s * weight)], axis=1)
    return w.reshape(2 * n_in, n) * _scale(normalization, n)


_NUMPY = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}
_BUILDERS = {"r2c": _r2c_matrix, "c2c": _c2c_matrix, "c2r": _c2r_matrix, "twiddle": _twiddle}


@functools.lru_cache(maxsize=64)
def _matrix(kind: str, args: tuple[Any, ...], dtype: torch.dtype) -> np.ndarray:
    """The float64 matrix cast once to ``dtype``. Built with numpy, outside any torch
    dispatch, so tracing records one constant, not the arithmetic that made it."""
    return _BUILDERS[kind](*args).astype(_NUMPY[dtype])


def _const(kind: str, like: torch.Tensor, *args: Any) -> torch.Tensor:
    # a new tensor per use: one tensor object seen by two traces came back from the
    # second as a fake tensor (the fake mode's memo of real tensors)
    return torch.from_numpy(_matrix(kind, args, like.dtype).copy())


# --------------------------------------------------------------------------- 1-d steps


def _split(n: int) -> tuple[int, int] | None:
    """n = n1 * n2 with n1 the largest divisor <= sqrt(n), when a transform of n points
    is done in two stages (longer than ``DIRECT_SIZE`` and not prime)."""
    if n <= DIRECT_SIZE:
        return None
    n1 = next(d for d in range(math.isqrt(n), 0, -1) if n % d == 0)
    return None if n1 == 1 else (n1, n // n1)


def _check_size(op: str, n: int) -> None:
    limit = MAX_FFT_SIZE if _split(n) else MAX_DFT_SIZE
    if n > limit:
        raise PrepareError(
            f"{op}: a transform of {n} points is longer than the {limit} this compiler "
            f"lowers ({MAX_DFT_SIZE} for a prime length, which is one DFT matmul whose "
            "matrix grows as n^2 and whose error grows with n); it runs eagerly.",
            op=op, reason="fft-too-large")


def _r2c_1d(x: torch.Tensor, dim: int, onesided: bool, normalization: int) -> torch.Tensor:
    n = x.shape[dim]
    n_out = n // 2 + 1 if onesided else n
    _check_size("aten._fft_r2c", n)
    if _split(n):  # a complex transform of (x, 0), cut to the half spectrum
        p = _c2c_1d(pairs(x), dim, True, normalization)
        return p.narrow(dim, 0, n_out) if n_out != n else p
    w = _const("r2c", x, n, n_out, normalization)
    y = torch.matmul(x.movedim(dim, -1), w)
    return y.unflatten(-1, (n_out, 2)).movedim(-2, dim)


def _c2c_1d(p: torch.Tensor, dim: int, forward: bool, normalization: int) -> torch.Tensor:
    """``p`` pairs (..., 2); ``dim`` counts the complex dims only."""
    n = p.shape[dim]
    _check_size("aten._fft_c2c", n)
    split = _split(n)
    if split:
        return _c2c_two_stage(p, dim, forward, normalization, *split)
    w = _const("c2c", p, n, forward, normalization)
    y = torch.matmul(p.movedim(dim, -2).flatten(-2), w)
    return y.unflatten(-1, (n, 2)).movedim(-2, dim)


def _c2c_two_stage(p: torch.Tensor, dim: int, forward: bool, normalization: int, n1: int,
                   n2: int) -> torch.Tensor:
    """Cooley-Tukey in two stages (n = n1 * n2, t = n2 * t1 + t2, k = k1 + n1 * k2):
    transforms of n1 points over t1, a twiddle e^{-+2pi i k1 t2 / n} (with the
    normalization folded in), transforms of n2 points over t2, then k read as (k2, k1).
    Each stage is a short matmul, so the constants hold n1^2 + n2^2 + n values instead
    of n^2 and the error grows with n1 + n2, not n (the way a TensorEngine tiles it)."""
    q = p.movedim(dim, -2).unflatten(-2, (n1, n2))  # (..., n1, n2, 2)
    nd = q.dim() - 1  # complex dims
    a = _c2c_1d(q, nd - 2, forward, 0)  # over t1 -> k1
    tw = _const("twiddle", a, n1, n2, forward, normalization)
    ar, ai, tr, ti = a[..., 0], a[..., 1], tw[..., 0], tw[..., 1]
    a = torch.stack([ar * tr - ai * ti, ar * ti + ai * tr], dim=-1)
    b = _c2c_1d(a, nd - 1, forward, 0)  # over t2 -> k2
    return b.transpose(-3, -2).flatten(-3, -2).movedim(-2, dim)


def _c2r_1d(p: torch.Tensor, dim: int, n: int, normalization: int) -> torch.Tensor:
    n_in = p.shape[dim]
    _check_size("aten._fft_c2r", n)
    if _split(n):
        return _c2r_two_stage(p, dim, n, normalization)
    w = _const("c2r", p, n_in, n, normalization)
    y = torch.matmul(p.movedim(dim, -2).flatten(-2), w)
    return y.movedim(-1, dim)


def _c2r_two_stage(p: torch.Tensor, dim: int, n: int, normalization: int) -> torch.Tensor:
    """The full Hermitian spectrum (X_{n-k} = conj X_k; the imaginary parts of X_0 and,
    for even n, X_{n/2} dropped, as pocketfft does), a backward complex transform, and
    its real part."""
    half = n // 2 + 1
    q = p.movedim(dim, -2)  # (..., n_in, 2)
    q = q[..., :half, :] if q.shape[-2] >= half else \
        torch.nn.functional.pad(q, (0, 0, 0, half - q.shape[-2]))
    keep = torch.from_numpy(_hermitian_mask(n).astype(_NUMPY[q.dtype]))
    q = q * keep
    tail = q[..., 1:n - half + 1, :].flip(-2)
    tail = torch.stack([tail[..., 0], -tail[..., 1]], dim=-1)
    full = torch.cat([q, tail], dim=-2)  # (..., n, 2)
    return _c2c_1d(full, full.dim() - 2, False, normalization)[..., 0].movedim(-1, dim)


def _hermitian_mask(n: int) -> np.ndarray:
    mask = np.ones((n // 2 + 1, 2))
    mask[0, 1] = 0.0
    if n % 2 == 0:
        mask[n // 2, 1] = 0.0
    return mask


def _dims(x: torch.Tensor, dim: Sequence[int]) -> list[int]:
    nd = x.dim()
    return [d % nd if nd else 0 for d in dim]


def _norm_per_dim(normalization: int) -> int:
    return normalization  # 1/sqrt(prod n) = prod 1/sqrt(n); 1/prod n = prod 1/n


# --------------------------------------------------------------------------- FFT ops


@_register(aten._fft_r2c.default)
def fft_r2c(x: torch.Tensor, dim: Sequence[int], normalization: int, onesided: bool) -> Any:
    """Forward real-to-complex over ``dim``: the last dim listed is the halved one
    (``onesided``), transformed first; then complex transforms over the others."""
    dims = _dims(x, dim)
    if not dims or x.is_complex() or not x.dtype.is_floating_point:
        return NotImplemented
    p = _r2c_1d(x, dims[-1], onesided, _norm_per_dim(normalization))
    for d in dims[:-1]:
        p = _c2c_1d(p, d, True, _norm_per_dim(normalization))
    return from_pairs(p)


@_register(aten._fft_c2c.default)
def fft_c2c(z: torch.Tensor, dim: Sequence[int], normalization: int, forward: bool) -> Any:
    dims = _dims(z, dim)
    if not dims or not z.is_complex():
        return NotImplemented
    p = pairs(z)
    for d in dims:
        p = _c2c_1d(p, d, forward, _norm_per_dim(normalization))
    return from_pairs(p)


@_register(aten._fft_c2r.default)
def fft_c2r(z: torch.Tensor, dim: Sequence[int], normalization: int, last_dim_size: int) -> Any:
    """Backward complex-to-real: complex transforms over all but the last dim listed,
    then the Hermitian half spectrum along it to ``last_dim_size`` real points."""
    dims = _dims(z, dim)
    if not dims or not z.is_complex():
        return NotImplemented
    p = pairs(z)
    for d in dims[:-1]:
        p = _c2c_1d(p, d, False, _norm_per_dim(normalization))
    return _c2r_1d(p, dims[-1], last_dim_size, _norm_per_dim(normalization))
