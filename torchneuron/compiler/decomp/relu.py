"""``relu`` / ``clamp`` / ``hardtanh`` / ``leaky_relu`` with eager's signed zeros.

ATen's CPU ``clamp`` (and ``clamp_min`` / ``clamp_max``, hence ``relu`` = ``clamp_min(x,
0)``, and ``hardtanh`` / ``relu6``, which call ``clamp``) replaces an element only when it
lies strictly beyond a bound: an element equal to the bound keeps its own bits. So
``relu(-0.0)`` is -0.0 and ``clamp(0.0, min=-0.0)`` is 0.0. The lowering used
``stablehlo.maximum`` / ``minimum`` / ``clamp``, whose IEEE max/min order -0.0 below 0.0
(``relu(-0.0)`` gave 0.0). Here each bound is a compare and a select in eager's order
(the lower bound first, then the upper: with ``min > max`` every element becomes ``max``),
and a NaN bound gives NaN as in eager (a NaN element stays NaN through both selects).

Bounds that are tensors (``clamp.Tensor``, ``clamp_min.Tensor``, ``clamp_max.Tensor``) on
a float tensor are refused, and the region runs eagerly: where an element and its bound
are zeros of opposite sign, eager's result depends on the element's position (its
vectorised loop returns the bound, the scalar loop finishing each chunk the element), so
no lowering can give eager's bits. ``torch.maximum`` / ``minimum`` have the same tie
behaviour in eager and are not handled here.

``leaky_relu`` is eager's ``x > 0 ? x : x * slope``, computed in float32 for float16 /
bfloat16 and rounded once (the lowering's ``max(x, 0) + min(x, 0) * slope`` summed two
zeros at -0.0, and multiplied by the slope rounded to float16). ``relu`` of an integer
tensor has no signed zero and keeps its lowering.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar
from torchneuron.compiler.errors import PrepareError

__all__ = ["RELU_DECOMPOSITIONS"]

aten = torch.ops.aten
RELU_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(RELU_DECOMPOSITIONS)
_HALVES = (torch.float16, torch.bfloat16)
Bound = float | int | None


def _exact_float(x: torch.Tensor, *bounds: Bound) -> bool:
    """Only floating tensors with real Python-number bounds are rewritten."""
    return x.is_floating_point() and not any(isinstance(b, complex | bool) for b in bounds)


def _splat(x: torch.Tensor, v: float | int) -> float | int | torch.Tensor:
    """The bound as ``where`` takes it: a Python number, except for float16 / bfloat16,
    whose 0-d constant Torch-MLIR prints only through ml_dtypes (a dependency now; this
    predates it); a full tensor of x's shape lowers to a splat constant either way."""
    return torch.full_like(x, v) if x.dtype in _HALVES else v


def _below(x: torch.Tensor, lo: Bound) -> torch.Tensor:
    if lo is None:
        return x
    if math.isnan(lo):  # a NaN bound gives NaN, as in eager
        return torch.full_like(x, math.nan)
    return torch.where(x < lo, _splat(x, lo), x)


def _above(x: torch.Tensor, hi: Bound) -> torch.Tensor:
    if hi is None:
        return x
    if math.isnan(hi):
        return torch.full_like(x, math.nan)
    return torch.where(x > hi, _splat(x, hi), x)


@_register(aten.clamp.default)
def clamp(x: torch.Tensor, min: Bound = None, max: Bound = None) -> Any:  # noqa: A002
    if not _exact_float(x, min, max) or (min is None and max is None):
        return NotImplemented
    return _above(_below(x, min), max)


@_register(aten.clamp_min.default)
def clamp_min(x: torch.Tensor, min: Bound) -> Any:  # noqa: A002
    return _below(x, min) if _exact_float(x, min) else NotImplemented


@_register(aten.clamp_max.default)
def clamp_max(x: torch.Tensor, max: Bound) -> Any:  # noqa: A002
    return _above(x, max) if _exact_float(x, max) else NotImplemented


@_register(aten.clamp.Tensor)
def clamp_by_tensors(x: torch.Tensor, min: torch.Tensor | None = None,  # noqa: A002
                     max: torch.Tensor | None = None) -> Any:  # noqa: A002
    """Integers: max then min (no signed zeros); floats: refused (module docstring)."""
    if _any_float(x, min, max):
        return _refuse_float_bounds()
    y = x if min is None else torch.maximum(x, min)
    return y if max is None else torch.minimum(y, max)


@_register(aten.clamp_min.Tensor)
def clamp_min_by_tensor(x: torch.Tensor, min: torch.Tensor) -> Any:  # noqa: A002
    return _refuse_float_bounds() if _any_float(x, min) else torch.maximum(x, min)


@_register(aten.clamp_max.Tensor)
def clamp_max_by_tensor(x: torch.Tensor, max: torch.Tensor) -> Any:  # noqa: A002
    return _refuse_float_bounds() if _any_float(x, max) else torch.minimum(x, max)


def _any_float(*ts: torch.Tensor | None) -> bool:
    return any(t is not None and t.is_floating_point() for t in ts)


def _refuse_float_bounds() -> Any:
    """NotImplemented while AOTAutograd traces (a raise there escapes ``torch.compile``;
    the op stays a node), else the refusal ``prepare`` raises."""
    if torch._guards.TracingContext.try_get() is not None:
        return NotImplemented
    raise PrepareError(
        "aten.clamp.Tensor: clamping a float tensor by tensor bounds takes, where an element "
        "and its bound are zeros of opposite sign, the bound in eager's vectorised loop and "
        "the element in its scalar tail; that is not lowered, this region runs eagerly.",
        op="aten.clamp.Tensor", reason="clamp-tensor-signed-zero")


@_register(aten.relu.default)
def relu(x: torch.Tensor) -> Any:
    return _below(x, 0.0) if x.is_floating_point() else NotImplemented


@_register(aten.hardtanh.default)
def hardtanh(x: torch.Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Any:
    if not _exact_float(x, min_val, max_val):
        return NotImplemented
    return _above(_below(x, min_val), max_val)


@_register(aten.leaky_relu.default)
def leaky_relu(x: torch.Tensor, negative_slope: float = 0.01) -> Any:
    if not x.is_floating_point():
        return NotImplemented
    y = x.to(torch.float32) if x.dtype in _HALVES else x
    return torch.where(y > 0, y, y * negative_slope).to(x.dtype)


@_register(aten.threshold_backward.default)
def threshold_backward(grad: torch.Tensor, x: torch.Tensor, threshold: Bound) -> Any:
    """ReLU's gradient: PyTorch's own decomposition, ``where(x <= threshold, 0, grad)``;
    in float16 / bfloat16 with the zero a full tensor (``_splat``: the 0-d constant of a
    half dtype failed the whole region's lowering before ml_dtypes was a dependency).
    Eager compares in float32; ReLU's threshold 0 compares the same in any float dtype
    (a half-dtype threshold other than 0, which the dtype may round, keeps the 0-d zero)."""
    if (grad.dtype in _HALVES and x.dtype == grad.dtype and _exact_float(x, threshold)
            and threshold == 0):
        return torch.where(x <= threshold, _splat(grad, 0), grad)
    return _CORE_THRESHOLD_BACKWARD(grad, x, threshold)


_CORE_THRESHOLD_BACKWARD = torch._decomp.decomposition_table[aten.threshold_backward.default]
