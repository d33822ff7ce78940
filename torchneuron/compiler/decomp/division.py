"""Rounded division (``floor_divide``, ``div`` with a rounding mode, ``trunc``) as eager.

Torch-MLIR's lowerings differ from ATen's kernels:

- integer floor division went through float64, ``floor(f64(a) / f64(b))``: past 2**53
  not the integer quotient ((2**62 + 12345) // 3 was off by 73), and a zero divisor gave
  a number where eager raises ZeroDivisionError. Here: the integer truncating division
  (exact; it raises on a zero divisor as eager does), stepped down by one where the
  remainder is non-zero and its sign differs from the divisor's (``div_floor_integer``).
- floating floor division was ``floor(a / b)``: 1.0 // 0.1 gave 10 where eager gives 9
  (the rounded quotient is 10, the true one just below), -0.5 // inf gave -0.0 (eager -1),
  inf // 2 inf (eager NaN). Here: ATen's ``div_floor_floating``, on the exact fmod
  (``decomp.fmod``), each step in the operands' type as eager's kernel (float16 too).
- ``trunc`` was ``sign(x) * floor(|x|)``, which loses -0.0 (trunc(-0.0), -0.5 trunc-divided
  by 1); here the floor or ceiling, whichever is toward zero.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar
from torchneuron.compiler.errors import PrepareError

__all__ = ["DIVISION_DECOMPOSITIONS"]

aten = torch.ops.aten
DIVISION_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(DIVISION_DECOMPOSITIONS)
_HALVES = (torch.float16, torch.bfloat16)


def _refuse_half_floor(op: str) -> Any:
    """NotImplemented while AOTAutograd traces (a raise there escapes ``torch.compile``;
    the op stays a node), else raises the refusal for ``prepare``."""
    if torch._guards.TracingContext.try_get() is not None:
        return NotImplemented
    raise _half_floor_error(op)


def _half_floor_error(op: str) -> PrepareError:
    """Floor division of a float16/bfloat16 result with an operand eager keeps wider (a
    Python number on the left, a 0-d tensor of another float dtype): how eager's kernel
    rounds those is not modelled (``[1, -0.5, 7] // tensor(0.1)`` in float16: eager
    [9, -5, 69], the plain lowering [10, -6, 70]), so the graph runs eagerly."""
    return PrepareError(
        f"{op}: floor division of a float16/bfloat16 tensor by a wider scalar operand is "
        "not lowered exactly; this region runs eagerly.", op=op, reason="half-floor-division")


def _is_integer(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex() \
        and t.dtype != torch.bool


def _floor_div_integer(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    q = torch.div(a, b, rounding_mode="trunc")
    r = a - q * b
    return q - ((r != 0) & ((r < 0) != (b < 0))).to(q.dtype)


def _floor_div_floating(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    q = a / b
    mod = torch.fmod(a, b)
    div = (a - mod) / b
    div = torch.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floor = torch.floor(div)
    floor = torch.where(div - floor > 0.5, floor + 1, floor)
    return torch.where(b == 0, q, torch.where(div != 0, floor, q * 0.0))  # 0 with q's sign


@_register(aten.div.Tensor_mode)
def div_mode(a: Any, b: Any, *, rounding_mode: str | None) -> Any:
    if rounding_mode is None:
        return NotImplemented
    if not isinstance(a, torch.Tensor):  # a Python number divided by a tensor: ``5 // t``
        if not isinstance(b, torch.Tensor) or not isinstance(a, (int, float)) \
                or isinstance(a, bool):
            return NotImplemented
        dtype = torch.result_type(a, b)
        if dtype in _HALVES and rounding_mode == "floor":
            return _refuse_half_floor("aten.div.Tensor_mode")
        if dtype in (*_HALVES, torch.bool) or dtype.is_complex:
            return NotImplemented
        a = torch.scalar_tensor(a, dtype=dtype, device=b.device)
    if a.is_complex():
        return NotImplemented
    work = dtype = torch.result_type(a, b)
    if dtype in _HALVES and rounding_mode == "floor" and any(
        isinstance(t, torch.Tensor) and t.dim() == 0 and t.dtype != dtype for t in (a, b)
    ):  # fmt: skip
        return _refuse_half_floor("aten.div.Tensor_mode")
    if not isinstance(b, torch.Tensor):
        if not isinstance(b, (int, float)) or isinstance(b, bool):
            return NotImplemented
        if dtype in (torch.float16, torch.bfloat16):  # eager keeps a Python divisor in
            work = torch.float32                       # float32 and computes there
        b = torch.scalar_tensor(b, dtype=work, device=a.device)
    if _is_integer(a) and _is_integer(b):
        return _floor_div_integer(a, b) if rounding_mode == "floor" else NotImplemented
    if not dtype.is_floating_point:
        return NotImplemented
    a, b = a.to(work), b.to(work)  # two float16 tensors step by step in float16, as eager
    out = _floor_div_floating(a, b) if rounding_mode == "floor" else torch.trunc(a / b)
    return out.to(dtype)


@_register(aten.trunc.default)
def trunc(x: torch.Tensor) -> Any:
    if not x.is_floating_point():
        return NotImplemented
    return torch.where(x < 0, torch.ceil(x), torch.floor(x))
