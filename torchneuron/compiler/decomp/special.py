"""Special functions (gamma family, error functions, Bessel I) as exact decompositions.

Torch-MLIR has no lowering for ``lgamma``, ``digamma``, ``erfc``, ``erfinv``, ``i0`` and
their relatives. A float32 polynomial fit would compile, but it drifts from eager by its
own fitting error on top of rounding, and a compiled graph must give eager's numbers. So
every entry here is one of two kinds:

- **ATen's own algorithm** where ATen's CPU kernel is a fixed sequence of arithmetic
  (digamma's shift-to-10 loop has at most 10 trips, trigamma's 6, erfinv is a rational
  start plus two Newton steps): the same steps, unrolled, with masks for the trips a
  value does not take.
- **The correctly rounded value** where ATen calls libm (``lgamma``, ``erfc``) or where
  its float32 kernel is itself accurate to about an ulp (the Bessel I series): the
  function is evaluated in float64 from a convergent expansion whose truncation error is
  below 1e-14 (Lanczos with g=7 for lgamma, the power series and the Hankel asymptotic
  series for Bessel I, the Laplace continued fraction for erfc) and rounded once to
  float32, so it sits within rounding of eager's value.

Bessel K0 / K1 are also evaluated in float64 (power series up to 2, the cosh-integral by
the trapezoid rule beyond). Ops whose kernel is a large bespoke approximation (``erfcx``'s
Faddeeva fits) are deliberately absent: they run eagerly. Hurwitz ``zeta``, whose loop is
unbounded for negative ``q``, is in decomp/zeta.py; Bessel J / Y and Airy Ai, computed in
float32 by ATen, in decomp/bessel.py.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["SPECIAL_DECOMPOSITIONS"]

aten = torch.ops.aten
SPECIAL_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_F64 = torch.float64


_register = registrar(SPECIAL_DECOMPOSITIONS)


def _result_dtype(x: torch.Tensor) -> torch.dtype:
    """Floating inputs keep their dtype; integer ones promote to the default float."""
    return x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()


def _wide(x: torch.Tensor) -> torch.Tensor:
    return x.to(_F64)


def _as_dtype(v: float, dtype: torch.dtype) -> float:
    """A Python float rounded to ``dtype`` (ATen computes n! as exp(lgamma(n+1)) in it)."""
    if dtype == torch.float32:
        return struct.unpack("f", struct.pack("f", v))[0]
    return v


def _rounded(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` computed in float64 and rounded once to x's dtype: the correctly rounded
    value that libm's float32 functions return (to within an ulp)."""
    return fn(_wide(x)).to(x.dtype)


# --------------------------------------------------------------------------- lgamma

# Lanczos coefficients for g = 7, n = 9 (relative error about 1e-15 for Re z > 0.5).
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012,
            9.9843695780195716e-6, 1.5056327351493116e-7)


def _lgamma_lanczos(z: torch.Tensor) -> torch.Tensor:
    """log Gamma(z) for float64 z >= 0.5 (the alternating sum needs float64)."""
    w = z - 1
    a = torch.full_like(w, _LANCZOS[0])
    for i, c in enumerate(_LANCZOS[1:], start=1):
        a = a + c / (w + i)
    t = w + 7.5
    return 0.5 * math.log(2 * math.pi) + (w + 0.5) * torch.log(t) - t + torch.log(a)


@_register(aten.lgamma.default)
def lgamma(x: torch.Tensor) -> torch.Tensor:
    """libm's lgammaf is correctly rounded to within an ulp: Lanczos in float64, with the
    reflection formula below 0.5 (sin(pi r) on the exact fraction r = x - round(x))."""
    y = _wide(x)
    small = y < 0.5
    r = y - torch.round(y)
    refl = (math.log(math.pi) - torch.log(torch.abs(torch.sin(math.pi * r)))
            - _lgamma_lanczos(torch.where(small, 1 - y, 1.0)))
    out = torch.where(small, refl, _lgamma_lanczos(torch.where(small, 1.0, y)))
    out = torch.where(torch.isinf(y), math.inf, out)  # both infinities give +inf
    return out.to(_result_dtype(x))


# --------------------------------------------------------------------------- digamma, trigamma

# Asymptotic series of digamma: B_2k / (2k) for k = 1..7, innermost (highest power) first.
_PSI_ASYMPTOTIC = (1 / 12, -691 / 32760, 1 / 132, -1 / 240, 1 / 252, -1 / 120, 1 / 12)
_PSI_10 = 2.25175258906672110764  # digamma(10), which ATen returns exactly there


def _digamma_nonneg(x: torch.Tensor) -> torch.Tensor:
    """ATen's calc_digamma for x > 0: subtract 1/x while x < 10 (at most 10 trips), then
    the asymptotic series (dropped from 1e17 on)."""
    result = torch.zeros_like(x)
    for _ in range(10):
        below = x < 10
        result = result - torch.where(below, 1 / x, 0.0)
        x = torch.where(below, x + 1, x)
    z = 1 / (x * x)
    poly = torch.full_like(x, _PSI_ASYMPTOTIC[0])
    for c in _PSI_ASYMPTOTIC[1:]:
        poly = poly * z + c
    y = torch.where(x < 1e17, z * poly, 0.0)
    out = result + torch.log(x) - 0.5 / x - y
    return torch.where(x == 10, result + _PSI_10, out)


@_register(aten.digamma.default)
def digamma(x: torch.Tensor) -> torch.Tensor:
    """ATen's calc_digamma in float64: +-inf at +-0 (sign opposite to zero's), NaN at
    negative integers, reflection psi(1 - x) - pi / tan(pi r) below 0 with r the
    fraction of x (modf)."""
    y = _wide(x)
    neg = y < 0
    r = y - torch.trunc(y)
    pos = _digamma_nonneg(torch.where(neg, 1 - y, torch.where(y == 0, 1.0, y)))
    refl = pos - math.pi / torch.tan(math.pi * r)
    out = torch.where(neg, refl, pos)
    out = torch.where(neg & (y == torch.trunc(y)), math.nan, out)
    zero = torch.where(torch.signbit(y), math.inf, -math.inf)
    return torch.where(y == 0, zero, out).to(_result_dtype(x))


def _trigamma(x: torch.Tensor) -> torch.Tensor:
    """ATen's trigamma (polygamma n=1) in float64: reflection below 0.5, six shifts,
    then its asymptotic series."""
    xf = x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())
    y = _wide(x)
    small = y < 0.5
    s = _wide(_rounded(torch.sin, xf * math.pi))  # ATen: sinf(pi * x), pi * x in float
    result = torch.where(small, -(math.pi * math.pi) / (s * s), 0.0)
    y = torch.where(small, 1 - y, y)
    for _ in range(6):
        result = result + 1 / (y * y)
        y = y + 1
    ixx = 1 / (y * y)
    result = result + (1 + 1 / (2 * y) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / y
    return torch.where(small, -result, result).to(_result_dtype(x))


# Euler-Maclaurin divisors of ATen's (Cephes') zeta: (2k)! / B_2k.
_ZETA_EM = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
            7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
            -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18)
_MACHEP = 1.11022302462515654042e-16


def _zeta_positive(s: float, q: torch.Tensor) -> torch.Tensor:
    """ATen's zeta(s, q) for float64 q > 0 and a constant s > 1, in float64 as ATen's
    accumulator: q^-s plus 9 shifted terms (for q > 0 its loop makes exactly 9 trips) and
    12 Euler-Maclaurin terms; each early return is a mask that freezes the sum."""
    total = torch.pow(q, -s)
    a = q
    b = torch.zeros_like(q)
    done = torch.zeros_like(q, dtype=torch.bool)
    for _ in range(9):
        a = a + 1
        b = torch.pow(a, -s)
        total = torch.where(done, total, total + b)
        done = done | ((-_MACHEP * total < b) & (b < _MACHEP * total))
    w = a
    total = torch.where(done, total, total + b * w / (s - 1) - 0.5 * b)
    rising = torch.ones_like(q)
    k = 0.0
    for div in _ZETA_EM:
        rising = rising * (s + k)
        b = b / w
        t = rising * b / div
        total = torch.where(done, total, total + t)
        done = done | (torch.abs(t / total) < _MACHEP)
        k += 1
        rising = rising * (s + k)
        b = b / w
        k += 1
    return total


def _cot_derivative(n: int) -> list[float]:
    """Coefficients (lowest power first) of the polynomial P_n with
    d^n/dx^n cot(pi x) = P_n(cot(pi x)), from P_0(c) = c, P_(k+1) = -pi (1 + c^2) P_k'(c)."""
    poly = [0.0, 1.0]
    for _ in range(n):
        deriv = [i * c for i, c in enumerate(poly)][1:]
        nxt = [0.0] * (len(deriv) + 2)
        for i, c in enumerate(deriv):
            nxt[i] += -math.pi * c
            nxt[i + 2] += -math.pi * c
        poly = nxt
    return poly


def _polygamma_high(n: int, x: torch.Tensor) -> torch.Tensor:
    """ATen's calc_polygamma for n >= 2: (-1)^(n+1) n! zeta(n+1, x), zeta's result rounded
    to x's dtype first. x > 0: ATen's zeta step for step. Non-positive integers: zeta is
    inf there. Other negative x, where ATen's loop runs about -x times: the reflection
    psi_n(x) = -pi d^n/dx^n cot(pi x) + (-1)^n psi_n(1 - x), exact, in float64."""
    xf = x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())
    y = _wide(x)
    sign = 1.0 if n % 2 else -1.0
    fact = _as_dtype(math.exp(_as_dtype(math.lgamma(n + 1.0), xf.dtype)), xf.dtype)
    pos = _zeta_positive(n + 1.0, torch.where(y > 0, y, 1.0)).to(xf.dtype)
    direct = sign * fact * pos
    c = 1 / torch.tan(math.pi * (y - torch.round(y)))
    poly = _cot_derivative(n)
    value = torch.full_like(c, poly[-1])
    for coef in reversed(poly[:-1]):
        value = value * c + coef
    mirror = sign * math.factorial(n) * _zeta_positive(n + 1.0, torch.where(y > 0, 1.0, 1 - y))
    refl = (-math.pi * value + (-1) ** n * mirror).to(xf.dtype)
    out = torch.where(y > 0, direct, refl)
    out = torch.where((y <= 0) & (y == torch.floor(y)), sign * math.inf, out)
    return torch.where(torch.isnan(y), y.to(xf.dtype), out)


@_register(aten.polygamma.default)
def polygamma(n: int, x: torch.Tensor) -> Any:
    """n = 0, 1: digamma, trigamma (ATen's own kernels); n >= 2: see _polygamma_high."""
    if n == 0:
        return digamma(x)
    if n == 1:
        return _trigamma(x)
    return _polygamma_high(n, x)


# --------------------------------------------------------------------------- error functions


def _erfc_cf(u: torch.Tensor) -> torch.Tensor:
    """sqrt(pi) * exp(u^2) * erfc(u) for float64 u >= 3 (Laplace's continued fraction
    1 / (u + (1/2) / (u + 1 / (u + (3/2) / ...))), 60 levels, evaluated from the tail:
    converged to float64 for u >= 3)."""
    f = u.clone()
    for k in range(60, 0, -1):
        f = u + (k / 2) / f
    return 1 / f


def _erfc_wide(y: torch.Tensor) -> torch.Tensor:
    """erfc in float64: 1 - erf below 3 (erfc >= 2e-5 there, so no digits are lost at
    float32 precision), the continued fraction above; erfc(-u) = 2 - erfc(u)."""
    u = torch.abs(y)
    far = u >= 3
    tail = torch.exp(-u * u) * _erfc_cf(torch.where(far, u, 3.0)) / math.sqrt(math.pi)
    pos = torch.where(far, tail, 1 - torch.erf(u))
    return torch.where(y < 0, 2 - pos, pos)


@_register(aten.erfc.default)
def erfc(x: torch.Tensor) -> torch.Tensor:
    return _erfc_wide(_wide(x)).to(_result_dtype(x))


def _erfcx_wide(y: torch.Tensor) -> torch.Tensor:
    """exp(y^2) erfc(y) in float64 without overflow for large positive y."""
    u = torch.abs(y)
    far = u >= 3
    scaled = _erfc_cf(torch.where(far, u, 3.0)) / math.sqrt(math.pi)
    near = torch.exp(u * u) * (1 - torch.erf(u))
    pos = torch.where(far, scaled, near)
    return torch.where(y < 0, 2 * torch.exp(u * u) - pos, pos)


@_register(aten.special_erfcx.default)
def erfcx(x: torch.Tensor) -> torch.Tensor:
    """exp(x^2) erfc(x) from float64; below 0, ATen's 2 exp(x*x) - erfcx(-x) with x*x
    rounded to x's dtype as its kernel rounds it (the exp amplifies that rounding to a
    few ulps, so float64 there would differ from eager by up to 4e-6 relative)."""
    y = _wide(x)
    pos = _erfcx_wide(torch.abs(y))
    xx = _wide(x * x) if x.dtype.is_floating_point else y * y
    return torch.where(y < 0, 2 * torch.exp(xx) - pos, pos).to(_result_dtype(x))


@_register(aten.special_log_ndtr.default)
def log_ndtr(x: torch.Tensor) -> torch.Tensor:
    """ATen's calc_log_ndtr with float64 pieces: log(erfcx(-t) / 2) - t^2 below -1,
    log1p(-erfc(t) / 2) above (t = x / sqrt 2)."""
    y = _wide(x)
    t = y / math.sqrt(2)
    low = torch.log(_erfcx_wide(-torch.where(y < -1, t, -1.0)) / 2) - t * t
    high = torch.log1p(-_erfc_wide(torch.where(y < -1, 0.0, t)) / 2)
    return torch.where(y < -1, low, high).to(_result_dtype(x))


# The rational first guess of ATen's calc_erfinv (Pavlis's erfinv.m, 1996).
_ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
_ERFINV_B = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
_ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
_ERFINV_D = (3.543889200, 1.637067800)


def _horner(z: torch.Tensor, coeffs: tuple[float, ...]) -> torch.Tensor:
    """c[-1] z^(n-1) + ... + c[0], evaluated as ATen writes it (innermost first)."""
    out = coeffs[-1] * z + coeffs[-2]
    for c in reversed(coeffs[:-2]):
        out = out * z + c
    return out


@_register(aten.erfinv.default)
def erfinv(x: torch.Tensor) -> torch.Tensor:
    """ATen's calc_erfinv, step for step in x's own precision: the rational guess (central
    below |y| = 0.7, tail above), then two Newton steps on erf."""
    y = x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())
    ya = torch.abs(y)
    z = y * y
    central = y * _horner(z, _ERFINV_A) / (_horner(z, _ERFINV_B) * z + 1)
    w = torch.sqrt(-torch.log((1 - torch.where(ya <= 0.7, 0.0, ya)) / 2))
    tail = torch.copysign(_horner(w, _ERFINV_C), y) / (_horner(w, _ERFINV_D) * w + 1)
    r = torch.where(ya <= 0.7, central, tail)
    for _ in range(2):  # erf, exp correctly rounded to y's dtype, as libm's erff, expf are
        err = _rounded(torch.erf, r) - y
        r = r - err / ((2 / math.sqrt(math.pi)) * _rounded(torch.exp, -r * r))
    r = torch.where(ya == 1, torch.copysign(torch.full_like(y, math.inf), y), r)
    return torch.where(ya > 1, math.nan, r)


@_register(aten.special_ndtri.default)
def ndtri(p: torch.Tensor) -> torch.Tensor:
    """The inverse normal CDF to float64 accuracy, rounded once: solve Phi(x) = q in the
    lower tail (q = min(p, 1 - p), exact in float64, so no digits of p are lost), starting
    from A&S 26.2.23 (error < 5e-4) and three Halley steps on the accurate erfc."""
    y = _wide(p)
    q = torch.minimum(y, 1 - y)
    qs = torch.clamp(q, min=1e-300, max=0.5)
    t = torch.sqrt(-2 * torch.log(qs))
    x = -(t - (2.515517 + 0.802853 * t + 0.010328 * t * t)
          / (1 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t * t * t))
    for _ in range(3):
        e = _erfc_wide(-x / math.sqrt(2)) / 2 - qs
        u = e * math.sqrt(2 * math.pi) * torch.exp(x * x / 2)
        x = x - u / (1 + x * u / 2)
    x = torch.where(q == 0.5, 0.0, x)
    out = torch.where(y > 0.5, -x, x)
    out = torch.where(y == 0, -math.inf, torch.where(y == 1, math.inf, out))
    out = torch.where((y < 0) | (y > 1), math.nan, out)
    return out.to(_result_dtype(p))


# --------------------------------------------------------------------------- Bessel I

_SERIES_MAX = 30.0  # |x| up to here: power series (all terms positive, no cancellation)


def _bessel_i_wide(a: torch.Tensor, order: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(I_order(a) * exp(-a), far) for float64 a >= 0; ``far`` marks the asymptotic branch.

    Power series sum (a^2/4)^k / (k! (k+order)!) * (a/2)^order, 56 terms (converged to
    float64 up to a = 30); Hankel's series e^a / sqrt(2 pi a) * sum (-1)^k c_k(order) / a^k
    beyond, 24 terms (its smallest term near a = 30 is far below float64 precision)."""
    far = a > _SERIES_MAX
    s = torch.where(far, 0.0, a)
    quarter = s * s / 4
    term = torch.ones_like(s) if order == 0 else s / 2
    total = term
    for k in range(1, 57):
        term = term * quarter / (k * (k + order))
        total = total + term
    near = total * torch.exp(-s)
    b = torch.where(far, a, _SERIES_MAX + 1)
    mu = 4.0 * order * order
    term = torch.ones_like(b)
    hankel = term
    for k in range(1, 25):
        term = -term * (mu - (2 * k - 1) ** 2) / (k * 8 * b)
        hankel = hankel + term
    hankel = hankel / torch.sqrt(2 * math.pi * b)
    return torch.where(far, hankel, near), far


def _bessel_i(x: torch.Tensor, order: int, scaled: bool) -> torch.Tensor:
    """I0 / I1 (``scaled``: times exp(-|x|), i0e / i1e), correctly rounded from float64.
    I1 is odd. As in ATen's kernel, I overflows to inf where exp(|x|) does in x's
    precision, and +-inf gives NaN (I) or 0 (scaled)."""
    y = _wide(x)
    a = torch.abs(y)
    value, _ = _bessel_i_wide(a, order)
    if not scaled:  # ATen multiplies by exp(|x|) in x's precision: inf once that overflows
        overflow = torch.isinf(torch.exp(torch.abs(x.to(_result_dtype(x)))))
        value = torch.where(overflow, math.inf, value * torch.exp(a))
        value = torch.where(torch.isinf(a), math.nan, value)  # ATen: exp(inf) / sqrt(inf)
    else:
        value = torch.where(torch.isinf(a), 0.0, value)
    if order == 1:
        value = torch.where(y < 0, -value, value)
    return torch.where(torch.isnan(y), y, value).to(_result_dtype(x))


SPECIAL_DECOMPOSITIONS[aten.i0.default] = lambda x: _bessel_i(x, 0, False)
SPECIAL_DECOMPOSITIONS[aten.special_modified_bessel_i0.default] = lambda x: _bessel_i(x, 0, False)
SPECIAL_DECOMPOSITIONS[aten.special_i0e.default] = lambda x: _bessel_i(x, 0, True)
SPECIAL_DECOMPOSITIONS[aten.special_i1.default] = lambda x: _bessel_i(x, 1, False)
SPECIAL_DECOMPOSITIONS[aten.special_modified_bessel_i1.default] = lambda x: _bessel_i(x, 1, False)
SPECIAL_DECOMPOSITIONS[aten.special_i1e.default] = lambda x: _bessel_i(x, 1, True)


# --------------------------------------------------------------------------- Bessel K

_EULER = 0.57721566490153286061


def _bessel_k_series(x: torch.Tensor, order: int) -> torch.Tensor:
    """K0 / K1 for float64 0 < x <= 2 from their power series (40 terms, converged):
    K0 = -(ln(x/2) + gamma) I0(x) + sum_k>=1 H_k q^k / (k!)^2,
    K1 = 1/x + ln(x/2) I1(x) - (x/4) sum_k>=0 (psi(k+1) + psi(k+2)) q^k / (k! (k+1)!),
    q = x^2 / 4, H_k the harmonic numbers, psi(k+1) = H_k - gamma."""
    q = x * x / 4
    term = torch.ones_like(x)
    harmonic = 0.0
    if order == 0:
        i0, acc = term, torch.zeros_like(x)
        for k in range(1, 41):
            term = term * q / (k * k)
            harmonic += 1.0 / k
            i0 = i0 + term
            acc = acc + harmonic * term
        return -(torch.log(x / 2) + _EULER) * i0 + acc
    acc = (1.0 - 2 * _EULER) * term
    i1 = term
    for k in range(1, 41):
        term = term * q / (k * (k + 1))
        harmonic += 1.0 / k
        acc = acc + (2 * (harmonic - _EULER) + 1.0 / (k + 1)) * term
        i1 = i1 + term
    return 1 / x + torch.log(x / 2) * (x / 2) * i1 - x / 4 * acc


def _bessel_k_scaled_integral(x: torch.Tensor, order: int) -> torch.Tensor:
    """exp(x) K_order(x) for float64 x >= 2: the integral of exp(-x (cosh t - 1)) cosh(order
    t) over t >= 0 by the trapezoid rule, step min(0.25, 0.5 / sqrt x) over 40 points (the
    integrand is analytic and decays like a Gaussian of width 1/sqrt x, so the rule is
    converged to float64); cosh t - 1 = 2 sinh(t/2)^2 without cancellation."""
    h = torch.clamp(0.5 / torch.sqrt(x), max=0.25)
    total = 0.5 * torch.ones_like(x)
    for i in range(1, 40):
        t = i * h
        total = total + torch.exp(-x * 2 * torch.sinh(t / 2) ** 2) * torch.cosh(order * t)
    return total * h


def _bessel_k(x: torch.Tensor, order: int, scaled: bool) -> torch.Tensor:
    """K0 / K1 (``scaled``: times exp(x)), correctly rounded from float64; as ATen: inf at
    0, NaN below 0, 0 at +inf."""
    y = _wide(x)
    small = y <= 2
    xs = torch.where(small & (y > 0), y, 1.0)
    xl = torch.where(small | ~torch.isfinite(y), 2.0, y)
    series = _bessel_k_series(xs, order)
    integral = _bessel_k_scaled_integral(xl, order)
    if scaled:
        out = torch.where(small, series * torch.exp(xs), integral)
    else:
        out = torch.where(small, series, integral * torch.exp(-xl))
    out = torch.where(y == math.inf, 0.0, out)
    out = torch.where(y == 0, math.inf, out)
    # ATen takes log(0.5 * x) in x's precision (except unscaled K0, in double): 0.5 x is 0
    # for the smallest subnormal, so inf (scaled K0) and -inf * I1(x) = NaN (K1) there
    if scaled or order == 1:
        lost = (x.to(_result_dtype(x)) * 0.5 == 0) & (y > 0)
        out = torch.where(lost, math.inf if order == 0 else math.nan, out)
    out = torch.where((y < 0) | torch.isnan(y), math.nan, out)
    return out.to(_result_dtype(x))


SPECIAL_DECOMPOSITIONS[aten.special_modified_bessel_k0.default] = lambda x: _bessel_k(x, 0, False)
SPECIAL_DECOMPOSITIONS[aten.special_modified_bessel_k1.default] = lambda x: _bessel_k(x, 1, False)
SPECIAL_DECOMPOSITIONS[aten.special_scaled_modified_bessel_k0.default] = \
    lambda x: _bessel_k(x, 0, True)
SPECIAL_DECOMPOSITIONS[aten.special_scaled_modified_bessel_k1.default] = \
    lambda x: _bessel_k(x, 1, True)


# --------------------------------------------------------------------------- Hermite

_HERMITE_LIMIT = {torch.float32: 128, torch.float64: 512}  # ATen's getHermitianLimit


def _hermite(x: Any, n: Any, physicists: bool) -> Any:
    """ATen's hermite_polynomial_h / _he: n truncated to an integer (NaN / inf: -1), 0 for
    n < 0, NaN above the dtype's limit, else the three-term recurrence in x's precision.
    The limit bounds the loop, so it is unrolled with a mask for the trips n does not take."""
    if not isinstance(x, torch.Tensor):
        x = torch.scalar_tensor(x, dtype=n.dtype if isinstance(n, torch.Tensor) else None)
    x = x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())
    limit = _HERMITE_LIMIT.get(x.dtype)
    if limit is None:
        return NotImplemented
    n = torch.as_tensor(n, device=x.device)
    n = n.to(x.dtype) if n.dtype.is_floating_point else n.to(torch.int64).to(x.dtype)
    n = torch.where(torch.isfinite(n), torch.trunc(n), -1.0)
    x, n = torch.broadcast_tensors(x, n)
    two_x = x + x
    p = torch.ones_like(x)
    q = two_x if physicists else x
    first = q
    r = torch.zeros_like(x)
    for j in range(1, limit):
        k = 2 * j if physicists else j
        step = (two_x if physicists else x) * q - k * p
        active = j < n
        r = torch.where(active, step, r)
        p = torch.where(active, q, p)
        q = torch.where(active, step, q)
    out = torch.where(n > limit, math.nan, r)
    out = torch.where(n == 1, first, out)
    out = torch.where(n == 0, 1.0, out)
    return torch.where(n < 0, 0.0, out)


for _name, _phys in (("special_hermite_polynomial_h", True), ("special_hermite_polynomial_he", False)):
    _packet = getattr(aten, _name)
    for _ov in ("default", "x_scalar", "n_scalar"):
        SPECIAL_DECOMPOSITIONS[getattr(_packet, _ov)] = lambda x, n, p=_phys: _hermite(x, n, p)


# --------------------------------------------------------------------------- spherical j0


@_register(aten.special_spherical_bessel_j0.default)
def spherical_bessel_j0(x: torch.Tensor) -> torch.Tensor:
    """ATen's spherical_bessel_j0: the Taylor polynomial of sin(x)/x to x^12 below
    |x| = 0.5, sin(x) / x above, 0 at +-inf."""
    y = x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())
    z = y * y
    poly = torch.full_like(y, 1 / 6227020800.0)
    for c in (-1 / 39916800.0, 1 / 362880.0, -1 / 5040.0, 1 / 120.0, -1 / 6.0):
        poly = c + z * poly
    taylor = 1 + z * poly
    safe = torch.where(torch.abs(y) < 0.5, 1.0, y)
    out = torch.where(torch.abs(y) < 0.5, taylor, torch.sin(safe) / safe)
    return torch.where(torch.isinf(y), 0.0, out)
