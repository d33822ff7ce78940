"""``topk``, ``kthvalue``, unstable ``sort`` / ``argsort`` and ``median`` / ``nanmedian``
along a dim where eager's kernel cannot be carried: refused, since eager orders ties by
its algorithm, which the lowering cannot reproduce.

Which of several equal values eager's CPU ``topk`` returns first, which index
``kthvalue`` reports, and where an unstable ``sort`` puts equal values is decided by the
algorithm the kernel runs (a partial sort, ``nth_element``, an unstable sort), not by
position: on rows of 40 values in 0..3 the indices of tied values come out neither
ascending nor alike between the three ops, and -0.0 / 0.0 (equal to the comparator) come
out in the algorithm's order too; ``median`` along a dim picks the index of its
middle value among equal ones by its selection, not by the sort's order (a sort and a
gather gave other indices). The lowering erases the difference: Torch-MLIR
writes ``is_stable = false`` for stable sorts as well, and ``topk`` / ``kthvalue`` become
the same sort and a slice. So these ops are eager's own kernel in the program
(``decomp/eager_kernels``, a layer above this one); the entries here are what is left
when that does not apply (a call eager's kernel does not take): refused, and run
eagerly; a stable sort (``stable=True``) is then lowered as the plain sort (the
interpreter's is stable). A dimension of size 0 or 1 has no ties and is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import Lowering, registrar
from torchneuron.compiler.errors import PrepareError

__all__ = ["TIE_ORDER_DECOMPOSITIONS"]

aten = torch.ops.aten
TIE_ORDER_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(TIE_ORDER_DECOMPOSITIONS)
_STABLE = Lowering()  # set while a stable sort is lowered as the plain sort


def _tracing() -> bool:
    """True while AOTAutograd traces (torch.compile): a raise there escapes it."""
    return torch._guards.TracingContext.try_get() is not None


def _refuse(op: str, x: torch.Tensor, dim: int) -> Any:
    """NotImplemented where there can be no tie, or while AOTAutograd traces (a raise
    there escapes ``torch.compile``; the op stays a node), else the refusal."""
    if _STABLE.active or x.dim() == 0 or x.shape[dim] <= 1 or _tracing():
        return NotImplemented
    raise PrepareError(
        f"{op}: eager's CPU kernel orders tied values by its algorithm, which the lowering "
        "(a sort, with a slice) does not reproduce; this region runs eagerly.",
        op=op, reason="tie-order")


@_register(aten.topk.default)
def topk(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True) -> Any:  # noqa: A002
    return _refuse("aten.topk", x, dim)


@_register(aten.kthvalue.default)
def kthvalue(x: torch.Tensor, k: int, dim: int = -1, keepdim: bool = False) -> Any:
    if x.dim() == 0 or x.shape[dim] <= 1:  # no ties: the sort-and-slice entry
        with _STABLE.inside():
            return _kthvalue_by_sort(x, k, dim, keepdim)
    return _refuse("aten.kthvalue", x, dim)


@_register(aten.sort.default)
def sort(x: torch.Tensor, dim: int = -1, descending: bool = False) -> Any:
    return _refuse("aten.sort", x, dim)


@_register(aten.sort.stable)
def sort_stable(x: torch.Tensor, *, stable: bool | None = None, dim: int = -1,
                descending: bool = False) -> Any:
    """A stable sort lowers as the plain sort (the interpreter sorts stably); the
    stable overload itself has no lowering in this Torch-MLIR."""
    if not stable:
        return _refuse("aten.sort", x, dim)
    if _tracing():  # keep the stable node: a refused graph's eager fallback runs it
        return NotImplemented
    with _STABLE.inside():
        return aten.sort.default(x, dim, descending)


@_register(aten.argsort.default)
def argsort(x: torch.Tensor, dim: int = -1, descending: bool = False) -> Any:
    return _refuse("aten.argsort", x, dim)


@_register(aten.argsort.stable)
def argsort_stable(x: torch.Tensor, *, stable: bool, dim: int = -1,
                   descending: bool = False) -> Any:
    if not stable:
        return _refuse("aten.argsort", x, dim)
    if _tracing():
        return NotImplemented
    with _STABLE.inside():
        return aten.sort.default(x, dim, descending)[1]


def _single(x: torch.Tensor, dim: int, keepdim: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A median along a dim of one value (or of a 0-d tensor): the value, index 0."""
    v = x.clone() if x.dim() == 0 or keepdim else x.squeeze(dim).clone()
    return v, torch.zeros(v.shape, dtype=torch.int64, device=x.device)


def _median_dim(name: str) -> Callable[..., Any]:
    def median_dim(x: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
        """No tie along a dim of one value; else refused."""
        if x.dim() == 0 or x.shape[dim] == 1:
            return _single(x, dim, keepdim)
        return _refuse(name, x, dim)
    return median_dim


_register(aten.median.dim)(_median_dim("aten.median"))
_register(aten.nanmedian.dim)(_median_dim("aten.nanmedian"))


def _kthvalue_by_sort(x: torch.Tensor, k: int, dim: int = -1, keepdim: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor]:
    if x.dim() == 0:  # k is 1 (eager checks): the value itself, index 0
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    vals, idx = torch.sort(x, dim=dim)  # sort.stable has no lowering
    v, i = vals.narrow(dim, k - 1, 1), idx.narrow(dim, k - 1, 1)
    return (v, i) if keepdim or x.dim() == 0 else (v.squeeze(dim), i.squeeze(dim))
