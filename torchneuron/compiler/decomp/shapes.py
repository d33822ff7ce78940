"""Ops this torch-mlir lowers only for some shapes: operands that need broadcasting, 0-d.

``tools/lowering_coverage.py`` found that Torch-MLIR's StableHLO lowering of some
elementwise ops sizes its result from the *first* operand, so a first operand that
broadcasts against the others (``clamp_min(x[5, 1], m[5])``, ``fmin(x[5], y[])``) fails to
legalize or aborts the worker; and that some reductions and scans have no 0-d lowering.
Each entry here rewrites only those cases into the same op on shapes the lowering handles:

- broadcasting: every tensor operand is expanded to the broadcast shape first, which is
  what ATen's kernel does (``expand_outplace`` / TensorIterator); only when all operands
  share a dtype, since expanding a 0-d operand would change type promotion;
- 0-d ``cumsum``, ``_softmax`` (whose lowering hangs Torch-MLIR until the worker times
  out) and ``_log_softmax`` run on a 1-element view; 0-d ``max.dim`` / ``min.dim`` are the
  value itself and index 0 (the only element);
- ``linalg_vector_norm`` over dims that all have size 1 (a 0-d tensor included) is
  ``abs`` (``x != 0`` for ord 0), as ATen's kernel computes it before any reduction: the
  lowered ``sum(|x| ** ord) ** (1 / ord)`` overflowed, ``vector_norm(tensor(3.4e38),
  ord=6)`` gave inf where eager gives 3.4e38 (tools/special_sweep.py, ``big``); not a
  complex one, whose eager norm is not its ``abs`` (complex64 ord 6 of a 0-d: an ulp
  off in the exact sweep) and which the entry before leaves to ``refuse_complex``;
- ``_cdist_forward`` with an empty result or no features is zeros of the result's shape
  (PyTorch's decomposition fails to trace the p=inf norm over an empty dim);
- ``copysign.Scalar`` divides through a 0-d tensor, as ``copysign.Tensor`` lowers.

Every other case goes to the entry the table held before (PyTorch's or Torch-MLIR's
decomposition), or is traced as the op itself. Exact: no arithmetic is changed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["shape_decompositions"]

aten = torch.ops.aten

# Elementwise ops whose lowering fails when an operand broadcasts (all operands promote).
_BROADCAST_OPS = (aten.clamp_min.Tensor, aten.clamp_max.Tensor, aten.clamp.Tensor,
                  aten.fmin.default, aten.fmax.default)


def _call(op: Any, prev: Callable[..., Any] | None, *args: Any, **kwargs: Any) -> Any:
    """The table's previous entry for ``op`` if it had one, else ``NotImplemented`` (the
    tracer records the op itself)."""
    return NotImplemented if prev is None else prev(*args, **kwargs)


def _broadcasting(op: Any, prev: Callable[..., Any] | None) -> Callable[..., Any]:
    def fn(*args: Any, **kwargs: Any) -> Any:
        ts = [a for a in args if isinstance(a, torch.Tensor)]
        shape = torch.broadcast_shapes(*(t.shape for t in ts))
        if all(t.shape == shape for t in ts) or len({t.dtype for t in ts}) > 1:
            return _call(op, prev, *args, **kwargs)
        wide = [a.expand(shape) if isinstance(a, torch.Tensor) else a for a in args]
        return op(*wide, **kwargs)

    return fn


def _masked_scatter(prev: Callable[..., Any] | None) -> Callable[..., Any]:
    def fn(x: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> Any:
        shape = torch.broadcast_shapes(x.shape, mask.shape)
        if x.shape == shape and mask.shape == shape:
            return _call(aten.masked_scatter.default, prev, x, mask, source)
        return aten.masked_scatter.default(x.expand(shape), mask.expand(shape), source)

    return fn


def _cumsum(prev: Callable[..., Any] | None) -> Callable[..., Any]:
    def fn(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> Any:
        if x.dim() != 0:
            return _call(aten.cumsum.default, prev, x, dim, dtype=dtype)
        return aten.cumsum.default(x.reshape(1), 0, dtype=dtype).reshape(())

    return fn


def _one_element(op: Any, prev: Callable[..., Any] | None) -> Callable[..., Any]:
    """``op(x, dim, ...)`` on a 0-d ``x`` as ``op`` on ``x.reshape(1)`` over dim 0."""
    def fn(x: torch.Tensor, dim: Any = None, *args: Any, **kwargs: Any) -> Any:
        if x.dim() != 0:
            return _call(op, prev, x, dim, *args, **kwargs)
        one = None if dim is None else ([0] if isinstance(dim, (list, tuple)) else 0)
        return op(x.reshape(1), one, *args, **kwargs).reshape(())

    return fn


def _vector_norm(prev: Callable[..., Any] | None) -> Callable[..., Any]:
    op = aten.linalg_vector_norm.default

    def fn(x: torch.Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,
           dtype: torch.dtype | None = None) -> Any:
        if dim is None or (isinstance(dim, (list, tuple)) and not dim):
            dims = list(range(x.dim()))
        else:
            dims = [d % max(x.dim(), 1) for d in ([dim] if isinstance(dim, int) else dim)]
        if any(x.shape[d] != 1 for d in dims if x.dim()) or x.is_complex():
            return _call(op, prev, x, ord, dim, keepdim, dtype=dtype)
        one = x if dtype is None else x.to(dtype)
        if not keepdim and dims and x.dim():
            one = one.squeeze(dims)
        out = torch.abs(one)
        return (one != 0).to(out.dtype) if ord == 0 else out

    return fn


def _extreme_dim(op: Any, prev: Callable[..., Any] | None) -> Callable[..., Any]:
    def fn(x: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
        if x.dim() != 0:
            return _call(op, prev, x, dim, keepdim)
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)

    return fn


def _cdist(prev: Callable[..., Any] | None) -> Callable[..., Any]:
    op = aten._cdist_forward.default

    def fn(x1: torch.Tensor, x2: torch.Tensor, p: float, compute_mode: Any = None) -> Any:
        shape = [*torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]),
                 x1.shape[-2], x2.shape[-2]]
        if x1.shape[-1] != 0 and math.prod(shape) != 0:
            return _call(op, prev, x1, x2, p, compute_mode)
        return torch.zeros(shape, dtype=x1.dtype, device=x1.device)

    return fn


def _copysign_scalar(x: torch.Tensor, other: Any) -> torch.Tensor:
    dtype = torch.result_type(x, other)
    return aten.copysign.Tensor(x, torch.scalar_tensor(other, dtype=dtype, device=x.device))


def shape_decompositions(base: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """Entries wrapping ``base``'s (the table built so far) for the shapes above."""
    table: dict[Any, Callable[..., Any]] = {op: _broadcasting(op, base.get(op))
                                            for op in _BROADCAST_OPS}
    table[aten.masked_scatter.default] = _masked_scatter(base.get(aten.masked_scatter.default))
    table[aten.cumsum.default] = _cumsum(base.get(aten.cumsum.default))
    for op in (aten._softmax.default, aten._log_softmax.default):
        table[op] = _one_element(op, base.get(op))
    table[aten.linalg_vector_norm.default] = _vector_norm(base.get(aten.linalg_vector_norm.default))
    for op in (aten.max.dim, aten.min.dim):
        table[op] = _extreme_dim(op, base.get(op))
    table[aten._cdist_forward.default] = _cdist(base.get(aten._cdist_forward.default))
    table[aten.copysign.Scalar] = _copysign_scalar
    return table
