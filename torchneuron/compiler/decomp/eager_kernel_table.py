"""The decomposition table's layer for eager's own kernels (``decomp/eager_kernels``).

Why its own module: the kernels module says which calls run as eager's kernel and how a
program carries one; this one says how the decomposition table keeps such a call whole:
an entry per functional overload that keeps the node when the call applies (else the
entry before this layer), the ``.out`` and in-place overloads as that functional call and
a copy, and the batch norm that writes its running statistics as its functional overload's kernel.
Imports ``decomp.eager_kernels`` and torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.eager_kernels import (
    _WIDE,
    EAGER_KERNELS,
    EagerKernel,
    applies,
    functional_overloads,
)

__all__ = ["eager_kernel_decompositions"]

aten = torch.ops.aten
Table = dict[Any, Callable[..., Any]]


def _entry(kernel: EagerKernel, op: Any, base: Callable[..., Any] | None) -> Callable[..., Any]:
    def decomposition(*args: Any, **kwargs: Any) -> Any:
        if applies(kernel, op, args, kwargs):
            return NotImplemented  # the node stays: prepare carries it as eager's kernel
        return base(*args, **kwargs) if base is not None else NotImplemented

    return decomposition


def _writing_batch_norm(base: Callable[..., Any] | None) -> Callable[..., Any]:
    """``_native_batch_norm_legit`` (the overload that writes its running statistics) as
    its functional overload, eager's kernel, and two ``copy_`` into the statistics.

    Why: a graph adaptive eager captured holds ``native_batch_norm``, the op the device
    ran; the python dispatcher turns it into this overload below functionalization, where
    PyTorch's entry spelled it out as ``var_mean`` and arithmetic (a CNN's replayed
    region gave outputs, running variances and so every later gradient off in the last
    bits from the first replay on). The copies are written back by prepare's retrace
    (``_mutates_intermediates``), as PyTorch's entry's were; the call then reaches the
    functional overload's entry, which keeps it as eager's kernel. Half types keep the
    entries before (float16's premise, bfloat16's refusal), but for a float16 input that
    is not contiguous (channels-last), which the premise (``halves/half_batch_norm``) does
    not cover: it fell to PyTorch's decomposition, off in 588 of 2376 outputs."""
    functional = aten._native_batch_norm_legit_functional.default
    kernel = next(k for k in EAGER_KERNELS if functional.__name__.split(".")[0] in k.packets)

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        if (kwargs or len(args) != 8 or not _kernel_dtype(args[0])
                or not applies(kernel, functional, args, {})):
            return base(*args, **kwargs) if base is not None else NotImplemented
        out, mean, rstd, new_mean, new_var = functional(*args)
        args[3].copy_(new_mean)
        args[4].copy_(new_var)
        return out, mean, rstd

    return decomposition


def _out_overloads(packet: str, functionals: list[Any]) -> list[tuple[Any, Any]]:
    """(``.out`` overload, its functional overload) pairs of ``packet`` whose functional
    overload is one of ``functionals``: ``out`` goes with ``default``, ``X_out`` with ``X``."""
    op = getattr(aten, packet)
    pairs = []
    for name in op.overloads():
        base = "default" if name == "out" else name[:-4] if name.endswith("_out") else None
        if base is not None and base in op.overloads() and getattr(op, base) in functionals:
            pairs.append((getattr(op, name), getattr(op, base)))
    return pairs


def _out_entry(kernel: EagerKernel, functional: Any, base: Callable[..., Any] | None
               ) -> Callable[..., Any]:
    """An ``.out`` call as its functional overload, eager's kernel, and a ``copy_`` into
    ``out`` (of the result's shape and dtype; else ``base``'s entry, which resizes).

    Why: a graph adaptive eager captured holds the ``.out`` call the device ran
    (``torch.addmm(g, p, W, alpha=-1, out=g)`` in ``nn.LinearCrossEntropyLoss``'s
    backward), and PyTorch's entry for it spells the call out (``mm``, ``mul``, ``add``:
    two roundings where eager's kernel has one): the ModuleInfo replay sweep over every
    sample found its input gradient off in the last bit in 11 of 857 samples."""

    def decomposition(*args: Any, out: Any = None, **kwargs: Any) -> Any:
        got = _kernel_into(out, kernel, functional, args, kwargs)
        if got is not None:
            return got
        if base is None:
            return NotImplemented
        return base(*args, out=out, **kwargs)

    return decomposition


def _kernel_into(dest: Any, kernel: EagerKernel, functional: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> Any:
    """``dest.copy_(functional(*args, **kwargs))``, the call eager's kernel, or None when
    the call does not apply or its result has another shape or dtype than ``dest`` (the
    ``.out`` and in-place entries then take the entry before this layer)."""
    if isinstance(dest, torch.Tensor) and applies(kernel, functional, args, kwargs):
        result = functional(*args, **kwargs)
        if result.shape == dest.shape and result.dtype == dest.dtype:
            return dest.copy_(result)
    return None


def _inplace_overloads(packet: str, functionals: list[Any]) -> list[tuple[Any, Any]]:
    """(in-place overload, its functional overload) pairs: ``lerp_.Tensor`` with
    ``lerp.Tensor``, for each functional overload of ``packet`` in ``functionals``."""
    inplace = getattr(aten, packet + "_", None)
    if not isinstance(inplace, torch._ops.OpOverloadPacket):
        return []
    return [(getattr(inplace, f._overloadname), f) for f in functionals
            if f._overloadname in inplace.overloads()]


def _inplace_entry(kernel: EagerKernel, functional: Any, base: Callable[..., Any] | None
                   ) -> Callable[..., Any]:
    """An in-place call as its functional overload, eager's kernel, and a ``copy_`` into
    ``self`` (of ``self``'s shape and dtype; else ``base``'s entry).

    Why: a decomposition that runs above functionalization calls the in-place overload
    itself (PyTorch's ``quantile`` interpolates with ``lerp_``), and PyTorch's entry for
    it is the Python reference, which spells the call out: ``torch.quantile``'s
    interpolation rounded twice where eager's ``lerp`` fuses (5 of 60 OpInfo samples off
    in the last bit, once its sort compiled)."""

    def decomposition(self: Any, *args: Any, **kwargs: Any) -> Any:
        got = _kernel_into(self, kernel, functional, (self, *args), kwargs)
        if got is not None:
            return got
        if base is None:
            return NotImplemented
        return base(self, *args, **kwargs)

    return decomposition


def _kernel_dtype(x: torch.Tensor) -> bool:
    return x.dtype in _WIDE or x.dtype == torch.float16 and not x.is_contiguous()


def eager_kernel_decompositions(base: Table) -> Table:
    """The layer: an entry for every overload above that keeps the node when the call
    applies and otherwise defers to ``base``'s entry (the table built so far); its
    ``.out`` and in-place overloads as that functional call and a copy; and the batch norm that writes
    its statistics, as its functional overload's kernel."""
    table: Table = {}
    for kernel in EAGER_KERNELS:
        for packet in kernel.packets:
            functionals = functional_overloads(packet)
            for op in functionals:
                table[op] = _entry(kernel, op, base.get(op))
            for out_op, functional in _out_overloads(packet, functionals):
                table[out_op] = _out_entry(kernel, functional, base.get(out_op))
            for inplace_op, functional in _inplace_overloads(packet, functionals):
                if inplace_op in base:  # (without an entry, functionalization takes it)
                    table[inplace_op] = _inplace_entry(kernel, functional, base.get(inplace_op))
    legit = aten._native_batch_norm_legit.default
    table[legit] = _writing_batch_norm(base.get(legit))
    return table
