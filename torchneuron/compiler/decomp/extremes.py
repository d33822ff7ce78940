"""max / min / argmax / argmin / amax / amin as eager computes them on special values.

Torch-MLIR's lowerings of these reductions got three things wrong, each giving a number
that eager never gives:

- ``max.dim`` / ``min.dim`` propagated a NaN only when it was the first element of the
  reduced row ([1, inf, nan] gave inf). ATen's value is always ``x[argmax]`` (checked
  bit for bit, NaN and -0.0 included), and its argmax (first NaN, else first extreme)
  is lowered NaN-first by ``_nan_first`` (below), so the value is gathered at that index. (The
  max pools keep the plain reduction, ``nan_blind_max``: they apply ATen's pool rule,
  the last NaN, themselves.)
- uint8 was reduced as signed int8 with a signed initial value: amax of [3, 4] was 128,
  argmax 0. uint8 is reduced as int16, which holds every uint8 exactly.
- bool: argmax / argmin compiled although ATen refuses bool, and max.dim's index was
  always 0. The bool refusal is raised here, at trace time, so the graph runs eagerly
  and eager raises its own error; max.dim / min.dim / amax / amin reduce bool as int16
  (amin over a column of all True gave False).

Also: ``max()`` / ``min()`` of an empty tensor gave -inf / inf where eager raises, so it
is refused the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import Lowering, registrar

__all__ = ["EXTREMES_DECOMPOSITIONS"]

aten = torch.ops.aten
EXTREMES_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(EXTREMES_DECOMPOSITIONS)


def _comparable(x: torch.Tensor) -> torch.Tensor:
    """``x`` in a dtype whose lowered comparisons order it as ATen does (uint8 and bool
    as int16; everything else unchanged)."""
    return x.to(torch.int16) if x.dtype in (torch.uint8, torch.bool) else x


def _arg_extreme(name: str, nan_first: Callable[..., Any], x: torch.Tensor,
                 dim: int | None, keepdim: bool) -> Any:
    """bool refused, uint8 widened; floats go to the NaN-first argmax/argmin below."""
    if x.dtype == torch.bool:
        raise RuntimeError(f"{name}(): does not support bool input (eager refuses it too)")
    if x.dtype == torch.uint8 and x.dim() != 0:
        return getattr(torch, name)(x.to(torch.int16), dim, keepdim)
    return nan_first(x, dim, keepdim)


@_register(aten.argmax.default)
def argmax(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    return _arg_extreme("argmax", _nan_first_argmax, x, dim, keepdim)


@_register(aten.argmin.default)
def argmin(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    return _arg_extreme("argmin", _nan_first_argmin, x, dim, keepdim)


_NAN_BLIND = Lowering()  # set while ``nan_blind_max`` lowers through the plain max


@torch.library.custom_op("torchneuron::nan_blind_max", mutates_args=())
def _nan_blind_max_op(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eagerly (reached only if a graph holding it ran uncompiled): ``torch.max``."""
    values, index = torch.max(x, dim)
    return values, index


@_nan_blind_max_op.register_fake
def _nan_blind_max_fake(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    shape = [n for d, n in enumerate(x.shape) if d != dim % x.dim()]
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)


def nan_blind_max(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.max(x, dim)`` as the lowering computes it (NaN ignored), for the max pools,
    which apply ATen's pool rule (the last NaN) themselves and whose programs the
    interpreter fuses.

    Why an op of its own: under torch.compile the table is applied twice, by AOTAutograd
    and again by ``prepare`` on AOTAutograd's graph. A plain ``max.dim`` node left by the
    first pass would get ``max_dim``'s NaN rule in the second. So while Dynamo traces (a
    ``TracingContext`` is active) the pool keeps this op as a node, and the pass that
    lowers (no context) turns it into ``max.dim`` with ``max_dim`` stood aside. Should
    either guess be wrong the result stays right: the op left in a graph fails to lower
    (the graph runs eagerly), or the pool gets the NaN rule on top of its own.
    """
    return torch.ops.torchneuron.nan_blind_max(x, dim)


@_register(torch.ops.torchneuron.nan_blind_max.default)
def _nan_blind_max_decomposition(x: torch.Tensor, dim: int) -> Any:
    if torch._guards.TracingContext.try_get() is not None:
        return NotImplemented
    with _NAN_BLIND.inside():
        values, index = torch.max(x, dim=dim)
    return values, index


def _value_and_index(arg: Any, x: torch.Tensor, dim: int, keepdim: bool
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """ATen's (x[arg], arg): the value is the element at the index, bits and all."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    idx = arg(_comparable(x), dim, True)
    val = torch.gather(x, dim, idx)
    return (val, idx) if keepdim else (val.squeeze(dim), idx.squeeze(dim))


@_register(aten.max.dim)
def max_dim(x: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
    if _NAN_BLIND.active:
        return NotImplemented
    return _value_and_index(aten.argmax.default, x, dim, keepdim)


@_register(aten.min.dim)
def min_dim(x: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
    return _value_and_index(aten.argmin.default, x, dim, keepdim)


def _widened(op: Any, x: torch.Tensor, *args: Any) -> Any:
    if x.dtype not in (torch.uint8, torch.bool):
        return NotImplemented
    return op(_comparable(x), *args).to(x.dtype)


@_register(aten.amax.default)
def amax(x: torch.Tensor, dim: Any = (), keepdim: bool = False) -> Any:
    return _widened(aten.amax.default, x, dim, keepdim)


@_register(aten.amin.default)
def amin(x: torch.Tensor, dim: Any = (), keepdim: bool = False) -> Any:
    return _widened(aten.amin.default, x, dim, keepdim)


def _whole(op: Any, name: str, x: torch.Tensor) -> Any:
    if x.numel() == 0:
        raise RuntimeError(f"{name}(): an empty tensor has no {name} (eager raises too)")
    return _widened(op, x)


@_register(aten.max.default)
def max_all(x: torch.Tensor) -> Any:
    return _whole(aten.max.default, "max", x)


@_register(aten.min.default)
def min_all(x: torch.Tensor) -> Any:
    return _whole(aten.min.default, "min", x)


_INSIDE_ARG_REDUCTION = [False]


def _nan_first(op: Any, x: torch.Tensor, dim: int | None, keepdim: bool) -> Any:
    """ATen's argmax/argmin pick the first NaN when there is one; the lowering compares
    without NaN and gives the index of the largest (smallest) number. The op itself, then
    the index of the first NaN wherever the reduced slice holds one."""
    if _INSIDE_ARG_REDUCTION[0] or not x.is_floating_point():
        return NotImplemented
    if x.dim() == 0:  # the only index there is
        return torch.zeros((), dtype=torch.int64, device=x.device)
    _INSIDE_ARG_REDUCTION[0] = True
    try:
        plain = op(x, dim, keepdim)
    finally:
        _INSIDE_ARG_REDUCTION[0] = False
    v = x.reshape(-1) if dim is None else x
    d = 0 if dim is None else dim
    n = v.shape[d]
    shape = [1] * v.dim()
    shape[d] = n
    pos = torch.arange(n, device=x.device).reshape(shape).expand(v.shape)
    first = torch.where(torch.isnan(v), pos, torch.full_like(pos, n)).amin(d, keepdim=keepdim)
    if dim is None:
        first = first.reshape([1] * x.dim() if keepdim else [])
    return torch.where(first < n, first, plain)


def _nan_first_argmax(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    return _nan_first(aten.argmax.default, x, dim, keepdim)


def _nan_first_argmin(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    return _nan_first(aten.argmin.default, x, dim, keepdim)
