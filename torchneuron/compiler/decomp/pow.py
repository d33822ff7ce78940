"""``pow(tensor, scalar)`` as eager's CPU kernel computes it: products, sqrt and reciprocals.

ATen's CPU ``pow(tensor, scalar)`` calls C ``pow`` only for the exponents it has no
shortcut for. For float32, float64 and bfloat16 it runs ``x ** 0.5`` as ``sqrt``,
``x ** -0.5`` as ``rsqrt``, ``x ** -1`` as ``reciprocal``, ``x ** 2`` as ``x * x``,
``x ** 3`` as ``x * x * x`` and ``x ** -2`` as ``1 / (x * x)``, each step rounded in the
tensor's precision (bfloat16 rounds after the square, then after the next step). The
lowering kept ``stablehlo.power``, i.e. a (vectorised) C ``pow``, whose value differs:
``pow(-inf, 0.5)`` is inf where ``sqrt(-inf)`` is NaN, ``pow(-0.0, 0.5)`` is 0.0 where
``sqrt`` keeps -0.0, the products differ from ``pow`` in the last ulp, and where ``x * x``
overflows the quotient is 0 while ``pow`` gives a subnormal (float32 ``1e20 ** -2``).
The gradient path needs nothing extra: ``pow_backward`` is ``pow(x, e - 1) * e``, and
that ``pow`` comes here too.

Refused (the graph runs eagerly): bfloat16 ``x ** -0.5``. Eager's value there depends on
where the element sits in the tensor, not only on its value: the vectorised loop computes
``1 / sqrt`` in float32 and rounds once, the scalar loop that finishes each chunk rounds
``sqrt`` to bfloat16 first (30848 ** -0.5 is 0.0057067871 in the body and 0.0056762695
in the tail), and the chunking follows the tensor's size and the thread count.

Not rewritten, because eager takes C ``pow`` there as well: float16 (every exponent), a
tensor exponent (``torch.pow(x, torch.tensor(2.0))`` calls ``pow`` even when 0-d), and
integer tensors with an integer exponent (``powi``: wrapping products, which
``stablehlo.power`` on integers computes too). An integer tensor with a float exponent
is computed in the promoted float dtype, as eager does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar
from torchneuron.compiler.errors import PrepareError

__all__ = ["POW_DECOMPOSITIONS"]

aten = torch.ops.aten
POW_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(POW_DECOMPOSITIONS)
_SHORTCUT_DTYPES = (torch.float32, torch.float64, torch.bfloat16)  # float16: C pow in eager


def _shortcut(x: torch.Tensor, exponent: float) -> torch.Tensor | None:
    """Eager's rewrite of ``x ** exponent`` (x already in the result dtype), or None."""
    if exponent == 0.5:
        return torch.sqrt(x)
    if exponent == -0.5:
        return torch.rsqrt(x)
    if exponent == -1:
        return torch.reciprocal(x)
    if exponent == 2:
        return x * x
    if exponent == 3:
        return x * x * x
    if exponent == -2:
        return torch.reciprocal(x * x)
    return None


@_register(aten.pow.Tensor_Scalar)
def pow_tensor_scalar(x: torch.Tensor, exponent: Any) -> Any:
    if isinstance(exponent, complex) or isinstance(exponent, bool) or x.is_complex():
        return NotImplemented
    out_dtype = torch.result_type(x, exponent)
    if out_dtype not in _SHORTCUT_DTYPES or exponent in (0, 1):
        return NotImplemented  # 0 and 1: ATen fills ones / copies, as the lowering does
    if out_dtype == torch.bfloat16 and exponent == -0.5:
        return _refuse_bfloat16_rsqrt()
    y = _shortcut(x.to(out_dtype), float(exponent))
    return NotImplemented if y is None else y


def _refuse_bfloat16_rsqrt() -> Any:
    """NotImplemented while AOTAutograd traces (a raise there escapes ``torch.compile``;
    the op stays a node and ``prepare`` refuses it), else the refusal."""
    if torch._guards.TracingContext.try_get() is not None:
        return NotImplemented
    raise PrepareError(
        "aten.pow.Tensor_Scalar: bfloat16 x ** -0.5 takes a value in eager that depends on "
        "the element's position in the tensor (vectorised body vs scalar tail); it is not "
        "lowered, this region runs eagerly.", op="aten.pow.Tensor_Scalar",
        reason="bfloat16-rsqrt-position")
