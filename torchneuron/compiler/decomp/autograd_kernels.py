"""Ops whose Python Autograd kernel PyTorch decomposes before our table sees them.

Why: PyTorch registers a Python kernel for the Autograd key of ``aten.softshrink`` and
``aten.hardshrink`` (their references, ``torch._refs.nn.functional``), which the Python dispatcher (on in
AOTAutograd's trace and in prepare's) runs before any decomposition table is consulted:
under ``torch.compile`` the op reached the compiler as ``where(|x| > l, x - sign(x) * l,
x * 0)``, whose ``x * 0`` is -0.0 for a negative x inside the band, where eager's vector
body gives +0.0 (and its scalar tail -0.0: which one depends on the CPU's vector width).
While a trace runs, ``undecomposed()`` takes those kernels away, so the C++ Autograd
kernel records ``aten.softshrink`` (and its derivative, ``aten.softshrink_backward``)
and the table's entry (``decomp.eager_kernels``) keeps the node for eager's own kernel.
hardshrink likewise: the derivative of its reference's ``where`` gave the gradient at a
NaN input, which eager's vector body gives as 0 (``aten.hardshrink_backward`` now).
``multi_margin_loss`` likewise: its reference sums a sample's margins with ATen's
reduction, whose order is the CPU's vector width's, where eager's kernel sums them in a
loop of its own (last bits off in 7 of 8 outputs and gradients under torch.compile).

Entered by ``decomp.upsample_nodes.eager_resample_kernels`` (which holds
``TRACE_LOCK``, since the kernels are process-wide). Imports torch only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._C import DispatchKey

__all__ = ["UNDECOMPOSED", "undecomposed"]

aten = torch.ops.aten
UNDECOMPOSED = (aten.softshrink.default, aten.hardshrink.default, aten.multi_margin_loss.default)


@contextlib.contextmanager
def undecomposed() -> Iterator[None]:
    """While inside: the ops above have no Python Autograd kernel (restored after)."""
    saved: list[tuple[Any, Any]] = []
    for op in UNDECOMPOSED:
        kernel = op.py_kernels.pop(DispatchKey.Autograd, None)
        if kernel is not None:
            saved.append((op, kernel))
            op._dispatch_cache.clear()
    try:
        yield
    finally:
        for op, kernel in saved:
            op.py_kernels[DispatchKey.Autograd] = kernel
            op._dispatch_cache.clear()
