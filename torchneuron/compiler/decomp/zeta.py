"""Hurwitz ``special.zeta(x, q)`` as ATen's CPU kernel computes it, with a bound on its loop.

ATen (Cephes' ``zeta``, ``ATen/native/Math.h``) works in double for float and double
inputs: after the special values (inf at x = 1 or at a non-positive integer q, NaN for
x < 1 or a non-positive q with a non-integer x) it sums ``(q + i)^-x`` directly while
``i < 9 or q + i <= 9`` (stopping early once a term is below double epsilon of the sum),
then adds an Euler-Maclaurin tail of at most 12 terms (again stopping early). Both loops
are repeated here with the same operation order in float64, unrolled with masks: the
direct loop runs at most ``9 + _DIRECT_Q + 1`` trips for ``q >= -_DIRECT_Q``; each element
stops where the kernel's own loop would have stopped.

Only a negative non-integer q with an integer x makes the direct loop longer (about -q
trips). Below ``-_DIRECT_Q`` the same sum is regrouped, exactly in real arithmetic: with
q = -N + f (0 < f < 1), the terms q + k < 0 are -(m - f) for m = 1..N, so
zeta(x, q) = zeta(x, f) + (-1)^x (zeta(x, 1 - f) - zeta(x, N + 1 - f)), three evaluations
with positive q. That is the kernel's value to double rounding, so its float32 result is
eager's; for double inputs it agrees to about 1e-15 relative.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["ZETA_DECOMPOSITIONS"]

aten = torch.ops.aten
ZETA_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(ZETA_DECOMPOSITIONS)

_MACHEP = 1.11022302462515654042e-16
_EM = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
       7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
       -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18)
_DIRECT_Q = 24  # q >= -_DIRECT_Q: the kernel's direct loop, trip for trip


def _kernel_sum(x: torch.Tensor, q: torch.Tensor, trips: int) -> torch.Tensor:
    """The kernel's two loops for float64 x, q past its special-value checks; ``trips``
    must cover the direct loop (q + trips > 9)."""
    s = torch.pow(q, -x)
    a = q
    b = torch.zeros_like(q)
    done = torch.zeros_like(q, dtype=torch.bool)
    out = s
    for i in range(trips):
        going = ~done if i < 9 else ~done & (a <= 9.0)
        a_next = a + 1.0
        b_next = torch.pow(a_next, -x)
        s_next = s + b_next
        a = torch.where(going, a_next, a)
        b = torch.where(going, b_next, b)
        s = torch.where(going, s_next, s)
        stop = going & (-_MACHEP * s < b) & (b < _MACHEP * s)
        out = torch.where(stop, s, out)
        done = done | stop
    w = a
    s = s + b * w / (x - 1.0)
    s = s - 0.5 * b
    a = torch.ones_like(s)
    k = 0.0
    tail_done = done
    for coeff in _EM:
        a = a * (x + k)
        b = b / w
        t = a * b / coeff
        s = s + t
        stop = ~tail_done & (torch.abs(t / s) < _MACHEP)
        out = torch.where(stop, s, out)
        tail_done = tail_done | stop
        k += 1.0
        a = a * (x + k)
        b = b / w
        k += 1.0
    return torch.where(tail_done, out, s)


@_register(aten.special_zeta.default)
def special_zeta(x: torch.Tensor, q: torch.Tensor) -> Any:
    dtype = torch.promote_types(x.dtype, q.dtype)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    if dtype not in (torch.float32, torch.float64):
        return NotImplemented
    x64, q64 = torch.broadcast_tensors(x.to(torch.float64), q.to(torch.float64))
    integral_x = x64 == torch.floor(x64)
    near = q64 >= -_DIRECT_Q
    # the direct loop for q >= -_DIRECT_Q (safe arguments elsewhere)
    q_near = torch.where(near & ((q64 > 0) | (q64 != torch.floor(q64))), q64, 1.0)
    x_safe = torch.where(x64 > 1.0, x64, 2.0)
    direct = _kernel_sum(x_safe, q_near, 10 + _DIRECT_Q)
    # below: regrouped into three positive-q evaluations (x an integer there)
    fl = torch.floor(q64)
    f = torch.where(near | (q64 == fl), 0.5, q64 - fl)
    n = -fl
    far_x = torch.where(near, 2.0, x_safe)
    sign = torch.where(torch.remainder(far_x, 2.0) == 0, 1.0, -1.0)
    last = torch.where(near, 1.0, n + 1.0 - f)
    partial = _kernel_sum(far_x, 1.0 - f, 11) - _kernel_sum(far_x, last, 11)
    far = _kernel_sum(far_x, f, 11) + sign * partial
    # x = inf: a term with |q + k| < 1 is inf (there is one, q is not an integer)
    far = torch.where(torch.isposinf(x64), torch.inf, far)
    value = torch.where(near, direct, far)
    # the kernel's special values, last check first (NaN x or q: its sums give NaN)
    value = torch.where(torch.isnan(x64) | torch.isnan(q64), torch.nan, value)
    nonpos = q64 <= 0
    value = torch.where(nonpos & ~integral_x, torch.nan, value)
    value = torch.where(nonpos & (q64 == fl), torch.inf, value)
    value = torch.where(x64 < 1.0, torch.nan, value)
    value = torch.where(x64 == 1.0, torch.inf, value)
    return value.to(dtype)
