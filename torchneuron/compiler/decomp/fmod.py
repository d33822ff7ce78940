"""Floating ``fmod`` (and so ``remainder``, built on it) exact, as C's fmod is.

Torch-MLIR lowers ``aten.fmod`` of floats to ``a - b * trunc(a / b)``. The quotient is
rounded, so the result is off by up to an ulp of ``a``: fmod(1e6 * x, y) in float32 was off
by up to 0.06, remainder(angle, 2 * pi) by as much; and fmod(5, inf) gave NaN where C
gives 5. ``aten.remainder.Tensor`` itself lowers to ``stablehlo.remainder``, which *is* C
fmod (its sign rule is fixed up by ``_remainder_via_fmod``, below), so floating fmod is emitted as that op.

Why an op of its own (``torchneuron::c_fmod``): under torch.compile the table is applied
twice, by AOTAutograd and again by ``prepare`` on AOTAutograd's graph; a raw
``remainder.Tensor`` node left by the first pass would get ``_remainder_via_fmod``'s sign rule in
the second. While Dynamo traces (a ``TracingContext`` is active) ``c_fmod`` stays a node;
the pass that lowers turns it into ``remainder.Tensor`` with the sign rule stood aside
(see ``decomp.extremes.nan_blind_max``, which does the same for the max pools).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import Lowering, registrar

__all__ = ["FMOD_DECOMPOSITIONS"]

aten = torch.ops.aten
FMOD_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(FMOD_DECOMPOSITIONS)
_RAW = Lowering()  # set while ``c_fmod`` lowers through the raw remainder


@torch.library.custom_op("torchneuron::c_fmod", mutates_args=())
def _c_fmod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Eagerly (reached only if a graph holding it ran uncompiled): ``torch.fmod``."""
    return torch.fmod(a, b)


@_c_fmod.register_fake
def _c_fmod_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    shape = torch.broadcast_shapes(a.shape, b.shape)
    return a.new_empty(shape, dtype=torch.result_type(a, b))


@_register(aten.fmod.Tensor)
def fmod(a: torch.Tensor, b: torch.Tensor) -> Any:
    if not torch.result_type(a, b).is_floating_point:
        return NotImplemented  # integer a - b * trunc(a / b) is exact
    return torch.ops.torchneuron.c_fmod(a, b)


@_register(torch.ops.torchneuron.c_fmod.default)
def _c_fmod_decomposition(a: torch.Tensor, b: torch.Tensor) -> Any:
    if torch._guards.TracingContext.try_get() is not None:
        return NotImplemented
    dtype = torch.result_type(a, b)
    with _RAW.inside():
        return aten.remainder.Tensor(a.to(dtype), b.to(dtype))


@_register(aten.remainder.Tensor)
def remainder(a: torch.Tensor, b: torch.Tensor) -> Any:
    """Raw (C fmod) inside ``c_fmod``; otherwise ``_remainder_via_fmod``'s Python sign rule."""
    if _RAW.active:
        return NotImplemented
    return _remainder_via_fmod(a, b)


def _python_remainder(r: torch.Tensor, divisor: Any) -> torch.Tensor:
    """fmod result ``r`` -> remainder: add the divisor where the signs disagree."""
    fix = (r != 0) & ((r < 0) != (divisor < 0))
    return torch.where(fix, r + divisor, r)


def _remainder_via_fmod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _python_remainder(torch.fmod(a, b), b)


@_register(aten.remainder.Scalar)
def remainder_scalar(a: torch.Tensor, b: Any) -> torch.Tensor:
    # fmod.Scalar does not lower; a 0-d divisor does
    rhs = torch.scalar_tensor(b, dtype=torch.result_type(a, b), device=a.device)
    if rhs.dtype == torch.uint8:  # eager wraps the divisor to uint8 (-3 -> 253) first
        b = int(b) % 256
    return _python_remainder(torch.fmod(a, rhs), b)


@_register(aten.remainder.Scalar_Tensor)
def remainder_scalar_tensor(a: Any, b: torch.Tensor) -> torch.Tensor:
    dtype = torch.result_type(a, b)
    lhs = torch.full_like(b, a, dtype=dtype)
    return _python_remainder(torch.fmod(lhs, b), b)
