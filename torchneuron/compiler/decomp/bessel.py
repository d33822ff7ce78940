"""Bessel J0 / J1 / Y0 / Y1 and Airy Ai, step for step as ATen's CPU kernels compute them.

ATen evaluates these (Cephes-derived rational approximations, ``ATen/native/Math.h``) in
the input's own precision: float32 inputs get float32 arithmetic throughout. Past |x| = 5
the Bessel functions are an amplitude times cos / sin of the float32 phase ``x - pi/4``;
at large x that phase has lost digits to rounding, and a more accurate evaluation (float64,
or another approximation) disagrees with eager by the phase error, far beyond tolerance.
So each function here repeats ATen's steps in the same precision: the same coefficients
(rounded to the dtype as ATen's ``static const T`` tables are), the same Horner
recurrences, the same operation order, the same branch points and special values. Each
branch is computed for every element and the kernel's choice is made with ``where``.

Three things about *how* the kernel's float32 arithmetic is rounded matter as much as the
steps: its sqrt / sin / cos / log / exp are C's correctly rounded float functions (torch's
vectorised float32 ones are not: ``_libm``), ``c / x`` is a true division (``_rdiv``), and
its multiply-adds are fused (``_fma``). With all three, 99% of float32 results over
|x| <= 1e4 are bit-equal to eager's and the rest differ by an ulp.

The one loop with a data-dependent trip count, the Airy power series (it runs until the
newest term is below float epsilon relative to the sum), is unrolled to a bound that
covers its whole domain (|x| < 2.09); each element stops updating once its own loop
would have stopped, so the sums are the kernel's.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["BESSEL_DECOMPOSITIONS"]

aten = torch.ops.aten
BESSEL_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(BESSEL_DECOMPOSITIONS)

# Asymptotic-branch tables (shared by J0 / Y0 and by J1 / Y1, as in Math.h).
_PP0 = (7.96936729297347051624e-04, 8.28352392107440799803e-02, 1.23953371646414299388e+00,
        5.44725003058768775090e+00, 8.74716500199817011941e+00, 5.30324038235394892183e+00,
        9.99999999999999997821e-01)
_PQ0 = (9.24408810558863637013e-04, 8.56288474354474431428e-02, 1.25352743901058953537e+00,
        5.47097740330417105182e+00, 8.76190883237069594232e+00, 5.30605288235394617618e+00,
        1.00000000000000000218e+00)
_QP0 = (-1.13663838898469149931e-02, -1.28252718670509318512e+00, -1.95539544257735972385e+01,
        -9.32060152123768231369e+01, -1.77681167980488050595e+02, -1.47077505154951170175e+02,
        -5.14105326766599330220e+01, -6.05014350600728481186e+00)
_QQ0 = (6.43178256118178023184e+01, 8.56430025976980587198e+02, 3.88240183605401609683e+03,
        7.24046774195652478189e+03, 5.93072701187316984827e+03, 2.06209331660327847417e+03,
        2.42005740240291393179e+02)
_PP1 = (7.62125616208173112003e-04, 7.31397056940917570436e-02, 1.12719608129684925192e+00,
        5.11207951146807644818e+00, 8.42404590141772420927e+00, 5.21451598682361504063e+00,
        1.00000000000000000254e+00)
_PQ1 = (5.71323128072548699714e-04, 6.88455908754495404082e-02, 1.10514232634061696926e+00,
        5.07386386128601488557e+00, 8.39985554327604159757e+00, 5.20982848682361821619e+00,
        9.99999999999999997461e-01)
_QP1 = (5.10862594750176621635e-02, 4.98213872951233449420e+00, 7.58238284132545283818e+01,
        3.66779609360150777800e+02, 7.10856304998926107277e+02, 5.97489612400613639965e+02,
        2.11688757100572135698e+02, 2.52070205858023719784e+01)
_QQ1 = (7.42373277035675149943e+01, 1.05644886038262816351e+03, 4.98641058337653607651e+03,
        9.56231892404756170795e+03, 7.99704160447350683650e+03, 2.82619278517639096600e+03,
        3.36093607810698293419e+02)
# Small-argument tables.
_RP0 = (-4.79443220978201773821e+09, 1.95617491946556577543e+12, -2.49248344360967716204e+14,
        9.70862251047306323952e+15)
_RQ0 = (4.99563147152651017219e+02, 1.73785401676374683123e+05, 4.84409658339962045305e+07,
        1.11855537045356834862e+10, 2.11277520115489217587e+12, 3.10518229857422583814e+14,
        3.18121955943204943306e+16, 1.71086294081043136091e+18)
_RP1 = (-8.99971225705559398224e+08, 4.52228297998194034323e+11, -7.27494245221818276015e+13,
        3.68295732863852883286e+15)
_RQ1 = (6.20836478118054335476e+02, 2.56987256757748830383e+05, 8.35146791431949253037e+07,
        2.21511595479792499675e+10, 4.74914122079991414898e+12, 7.84369607876235854894e+14,
        8.95222336184627338078e+16, 5.32278620332680085395e+18)
_YP0 = (1.55924367855235737965e+04, -1.46639295903971606143e+07, 5.43526477051876500413e+09,
        -9.82136065717911466409e+11, 8.75906394395366999549e+13, -3.46628303384729719441e+15,
        4.42733268572569800351e+16, -1.84950800436986690637e+16)
_YQ0 = (1.04128353664259848412e+03, 6.26107330137134956842e+05, 2.68919633393814121987e+08,
        8.64002487103935000337e+10, 2.02979612750105546709e+13, 3.17157752842975028269e+15,
        2.50596256172653059228e+17)
_YP1 = (1.26320474790178026440e+09, -6.47355876379160291031e+11, 1.14509511541823727583e+14,
        -8.12770255501325109621e+15, 2.02439475713594898196e+17, -7.78877196265950026825e+17)
_YQ1 = (5.94301592346128195359e+02, 2.35564092943068577943e+05, 7.34811944459721705660e+07,
        1.87601316108706159478e+10, 3.88231277496238566008e+12, 6.20557727146953693363e+14,
        6.87141087355300489866e+16, 3.97270608116560655612e+18)

_PI_4 = 0.785398163397448309615660845819875721
_3PI_4 = 2.356194490192344928846982537459627163
_SQRT_2_PI = 0.797884560802865355879892119868763737  # sqrt(2 / pi)
_2_PI = 0.636619772367581343075535053490057448  # 2 / pi


def _floating(x: torch.Tensor) -> torch.Tensor:
    """Integer inputs promote to the default float, as ATen's unary float ops do."""
    return x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())


# ATen's CPU kernels exist for these dtypes only (half raises NotImplementedError there,
# and the rational coefficients overflow in it): any other dtype is left unlowered, so
# the graph is refused and eager gives its own answer or error.
_KERNEL_DTYPES = (torch.float32, torch.float64)


def _kernel(op: Any) -> Callable[[Callable[[torch.Tensor], torch.Tensor]], Callable[..., Any]]:
    """Register a lowering of ``op`` that takes the input promoted as ATen promotes it,
    and leaves ``op`` unlowered (``NotImplemented``) for dtypes ATen has no kernel for."""

    def wrap(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
        def lowering(x: torch.Tensor) -> Any:
            y = _floating(x)
            return fn(y) if y.dtype in _KERNEL_DTYPES else NotImplemented

        lowering.__name__, lowering.__doc__ = fn.__name__, fn.__doc__
        _register(op)(lowering)
        return lowering

    return wrap


def _pi_in(dtype: torch.dtype) -> float:
    """pi rounded to ``dtype``, as a Python float (no tensor constant in the graph)."""
    if dtype == torch.float32:
        return struct.unpack("f", struct.pack("f", math.pi))[0]
    return math.pi


def _libm(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` as C's float function gives it: correctly rounded (glibc's sqrtf exactly,
    its sinf / cosf / expf / logf to within rare ties). torch's float32 CPU kernels are
    vectorised approximations that miss by an ulp now and then (even ``sqrt``: 0.7% of
    random inputs), and one ulp of Airy's phase near x = -4000 is 0.016 rad; so float32 is
    evaluated in float64 and rounded once (sqrt: exactly the correctly rounded value)."""
    if x.dtype in (torch.float32, torch.float16, torch.bfloat16):
        return fn(x.to(torch.float64)).to(x.dtype)
    return fn(x)


def _rdiv(c: float, v: torch.Tensor) -> torch.Tensor:
    """``c / v`` as C divides: Python's ``c / tensor`` is ``reciprocal(v) * c`` in PyTorch
    (two roundings; a quarter of float32 results differ by an ulp), a 0-d tensor over ``v``
    is a true division, in eager and compiled alike."""
    return torch.div(v.new_full((), c), v)


def _fma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | float) -> torch.Tensor:
    """``a * b + c`` as the eager kernel computes it: PyTorch's CPU kernels are built for
    AVX2 / AVX512 with FMA and the default floating-point contraction, so the compiler fuses
    these multiply-adds (one rounding). For float32 the product is exact in float64 and the
    sum rounded twice (float64, float32), which is the single rounding but for rare ties;
    measured on J0's rational branch: 91% of results bit-equal to eager without, 100% with."""
    if a.dtype == torch.float32:
        wide = a.to(torch.float64) * b.to(torch.float64)
        c64 = c.to(torch.float64) if isinstance(c, torch.Tensor) else _f32(c)
        return (wide + c64).to(torch.float32)
    return a * b + c


def _f32(c: float) -> float:
    """A Python float rounded to float32 (the kernel's ``static const float`` tables)."""
    return struct.unpack("f", struct.pack("f", c))[0]


def _horner(w: torch.Tensor, coeffs: Sequence[float]) -> torch.Tensor:
    """ATen's ``acc = 0; for c: acc = acc * w + c`` (the first step is exactly c0 for any
    finite w, and every branch that uses the result has a finite w)."""
    acc = torch.full_like(w, coeffs[0])
    for c in coeffs[1:]:
        acc = _fma(acc, w, c)
    return acc


def _far(x: torch.Tensor, w: torch.Tensor, tables: tuple[Sequence[float], ...], phase: float,
         sine_first: bool) -> torch.Tensor:
    """The |x| > 5 branch for x > 5: sqrt(2/pi) / sqrt(x) times
    P cos(x - phase) - (5/x) Q sin(x - phase) (J), or P sin + (5/x) Q cos (Y)."""
    pp, pq, qp, qq = (_horner(w, t) for t in tables)
    shifted = x - phase
    p = pp / pq
    q = _rdiv(5.0, x) * (qp / qq)
    sin, cos = _libm(torch.sin, shifted), _libm(torch.cos, shifted)
    if sine_first:
        mix = _fma(p, sin, q * cos)
    else:
        mix = _fma(p, cos, -(q * sin))
    return mix * _SQRT_2_PI / _libm(torch.sqrt, x)


def _safe(cond: torch.Tensor, x: torch.Tensor, fill: float) -> torch.Tensor:
    """x where ``cond``, else a harmless value (branches not taken must not make NaNs that
    matter; they are discarded by ``where``, this only keeps them finite)."""
    return torch.where(cond, x, torch.full_like(x, fill))


def _j0_of_abs(a: torch.Tensor) -> torch.Tensor:
    """bessel_j0_forward for a = |x| (NaN passes through the far branch, as in ATen)."""
    near = a <= 5.0
    s = _safe(near, a, 1.0)
    ss = s * s
    small = (ss - 5.78318596294678452118e+00) * (ss - 3.04712623436620863991e+01) \
        * _horner(ss, _RP0) / _horner(ss, _RQ0)
    tiny = 1.0 - a * a / 4.0
    f = _safe(~near, a, 10.0)
    far = _far(f, _rdiv(25.0, f * f), (_PP0, _PQ0, _QP0, _QQ0), _PI_4, sine_first=False)
    return torch.where(near, torch.where(a < 0.00001, tiny, small), far)


def _j1_of_nonneg(a: torch.Tensor) -> torch.Tensor:
    """bessel_j1_forward for a >= 0 (or NaN)."""
    near = a <= 5.0
    s = _safe(near, a, 1.0)
    ss = s * s
    small = _horner(ss, _RP1) / _horner(ss, _RQ1) * s \
        * (ss - 1.46819706421238932572e+01) * (ss - 4.92184563216946036703e+01)
    f = _safe(~near, a, 10.0)
    r = _rdiv(5.0, f)
    far = _far(f, r * r, (_PP1, _PQ1, _QP1, _QQ1), _3PI_4, sine_first=False)
    return torch.where(near, small, far)


@_kernel(aten.special_bessel_j0.default)
def bessel_j0(y: torch.Tensor) -> torch.Tensor:
    return _j0_of_abs(torch.abs(y))


@_kernel(aten.special_bessel_j1.default)
def bessel_j1(y: torch.Tensor) -> torch.Tensor:
    """Odd: ATen returns -j1(-x) for x < 0."""
    value = _j1_of_nonneg(torch.abs(y))
    return torch.where(y < 0.0, -value, value)


def _y_result(y: torch.Tensor, near: torch.Tensor, small: torch.Tensor, far: torch.Tensor
              ) -> torch.Tensor:
    """Y0's and Y1's result: -inf at 0 and NaN below it (ATen tests zero first, so -0.0
    gives -inf), the rational form up to 5, the asymptotic form above."""
    small = torch.where(y == 0.0, -math.inf, torch.where(y < 0.0, math.nan, small))
    return torch.where(near, small, far)


@_kernel(aten.special_bessel_y0.default)
def bessel_y0(y: torch.Tensor) -> torch.Tensor:
    near = y <= 5.0
    s = _safe(near & (y > 0.0), y, 1.0)
    ss = s * s
    small = _fma(_2_PI * _libm(torch.log, s), _j0_of_abs(s), _horner(ss, _YP0) / _horner(ss, _YQ0))
    f = _safe(~near, y, 10.0)
    far = _far(f, _rdiv(25.0, f * f), (_PP0, _PQ0, _QP0, _QQ0), _PI_4, sine_first=True)
    return _y_result(y, near, small, far)


@_kernel(aten.special_bessel_y1.default)
def bessel_y1(y: torch.Tensor) -> torch.Tensor:
    near = y <= 5.0
    s = _safe(near & (y > 0.0), y, 1.0)
    ss = s * s
    bracket = _fma(_j1_of_nonneg(s), _libm(torch.log, s), -_rdiv(1.0, s))
    small = _fma(s, _horner(ss, _YP1) / _horner(ss, _YQ1), _2_PI * bracket)
    f = _safe(~near, y, 10.0)
    r = _rdiv(5.0, f)
    far = _far(f, r * r, (_PP1, _PQ1, _QP1, _QQ1), _3PI_4, sine_first=True)
    return _y_result(y, near, small, far)


# --------------------------------------------------------------------------- Airy Ai

_AN = (3.46538101525629032477e-01, 1.20075952739645805542e+01, 7.62796053615234516538e+01,
       1.68089224934630576269e+02, 1.59756391350164413639e+02, 7.05360906840444183113e+01,
       1.40264691163389668864e+01, 9.99999999999999995305e-01)
_AD = (5.67594532638770212846e-01, 1.47562562584847203173e+01, 8.45138970141474626562e+01,
       1.77318088145400459522e+02, 1.64234692871529701831e+02, 7.14778400825575695274e+01,
       1.40959135607834029598e+01, 1.00000000000000000470e+00)
_AFN = (-1.31696323418331795333e-01, -6.26456544431912369773e-01, -6.93158036036933542233e-01,
        -2.79779981545119124951e-01, -4.91900132609500318020e-02, -4.06265923594885404393e-03,
        -1.59276496239262096340e-04, -2.77649108155232920844e-06, -1.67787698489114633780e-08)
_AFD = (1.33560420706553243746e+01, 3.26825032795224613948e+01, 2.67367040941499554804e+01,
        9.18707402907259625840e+00, 1.47529146771666414581e+00, 1.15687173795188044134e-01,
        4.40291641615211203805e-03, 7.54720348287414296618e-05, 4.51850092970580378464e-07)
_AGN = (1.97339932091685679179e-02, 3.91103029615688277255e-01, 1.06579897599595591108e+00,
        9.39169229816650230044e-01, 3.51465656105547619242e-01, 6.33888919628925490927e-02,
        5.85804113048388458567e-03, 2.82851600836737019778e-04, 6.98793669997260967291e-06,
        8.11789239554389293311e-08, 3.41551784765923618484e-10)
_AGD = (9.30892908077441974853e+00, 1.98352928718312140417e+01, 1.55646628932864612953e+01,
        5.47686069422975497931e+00, 9.54293611618961883998e-01, 8.64580826352392193095e-02,
        4.12656523824222607191e-03, 1.01259085116509135510e-04, 1.17166733214413521882e-06,
        4.91834570062930015649e-09)
_1_SQRT_PI = 5.64189583547756286948e-01

# Trips of the power-series loop: at most 11 for any float32 x in (-2.09, 2.09) (checked
# on a 2e7-point grid and on every float32 within 2e6 ulps of the zero of the series' sum
# near x = -1.986, where the relative stopping test takes longest); float64 needs more
# terms for its smaller epsilon. Extra trips are exact no-ops (the element has stopped).
_AIRY_TRIPS = {torch.float32: 14, torch.float64: 22}


def _airy_series(x: torch.Tensor) -> torch.Tensor:
    """ATen's Maclaurin loop: f, g summed until |m / f| <= epsilon, then c1 f - c2 g."""
    eps = torch.finfo(x.dtype).eps
    one = torch.ones_like(x)
    f, g, k, m, n, t = one, x, one, one, x, one
    z = x * x * x
    for _ in range(_AIRY_TRIPS[x.dtype]):
        going = t > eps
        m2 = m * z
        k2 = k + 1.0
        m2 = m2 / k2
        n2 = n * z
        k2 = k2 + 1.0
        n2 = n2 / k2
        m2 = m2 / k2
        f2 = f + m2
        k2 = k2 + 1.0
        n2 = n2 / k2
        g2 = g + n2
        t2 = torch.abs(m2 / f2)
        m, k, n = torch.where(going, m2, m), torch.where(going, k2, k), torch.where(going, n2, n)
        f, g, t = torch.where(going, f2, f), torch.where(going, g2, g), torch.where(going, t2, t)
    return _fma(f.new_full((), 0.355028053887817239260).expand_as(f), f, -(0.258819403792806798405 * g))


@_kernel(aten.special_airy_ai.default)
def airy_ai(y: torch.Tensor) -> torch.Tensor:
    """ATen's branches: NaN at +-inf, 0 above 103.892, the oscillating asymptotic form
    below -2.09, the decaying one from 2.09 up, the power series between."""
    neg = y < -2.09
    pos = y >= 2.09
    # below -2.09
    a = _safe(neg & torch.isfinite(y), y, -4.0)
    root = _libm(torch.sqrt, -a)
    big = -2.0 * a * root / 3.0
    z = _rdiv(1.0, big)
    zz = z * z
    afn, afd = _horner(zz, _AFN), _horner(zz, _AFD)
    agn, agd = _horner(zz, _AGN), _horner(zz, _AGD)
    phase = big + 0.25 * _pi_in(y.dtype)
    oscill = _rdiv(_1_SQRT_PI, _libm(torch.sqrt, root)) \
        * _fma(_libm(torch.sin, phase), 1.0 + zz * afn / afd, -(_libm(torch.cos, phase) * (z * agn / agd)))
    # from 2.09 up
    b = _safe(pos & torch.isfinite(y), y, 4.0)
    zeta = 2.0 * b * _libm(torch.sqrt, b) / 3.0
    w = _rdiv(1.0, zeta)
    decay = _1_SQRT_PI * (_horner(w, _AN) / _horner(w, _AD)) \
        / (2.0 * _libm(torch.sqrt, _libm(torch.sqrt, b)) * _libm(torch.exp, zeta))
    # between
    series = _airy_series(_safe(~neg & ~pos, y, 0.0))
    series = torch.where(torch.isnan(y), y, series)
    out = torch.where(neg, oscill, torch.where(pos, decay, series))
    out = torch.where(y > 103.892, 0.0, out)
    return torch.where(torch.isinf(y), math.nan, out)
