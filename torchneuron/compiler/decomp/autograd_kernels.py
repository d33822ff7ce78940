"""Ops whose Python kernel PyTorch decomposes before our table sees them.

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
``matmul`` (its Python kernel at ``CompositeImplicitAutograd``): its ``should_fold``
checks the larger operand's layout where ATen checks the transposed one's, so a vector
times a batch of matrices folded into an ``mv`` that eager never calls (eager broadcasts
the vector into a ``bmm``: one ulp off in OpInfo's sample of [10] by [5, 10, 5]); ATen's
own composite decomposes it now, but for the one case where that composite itself takes
another path for a traced tensor than for eager's (a 3-D by 3-D product with a batch of 1:
``device.plain_paths``, which is matmul's Python kernel while a trace runs). ``multi_margin_loss`` at the Autograd key: its
reference sums a sample's margins with ATen's reduction, whose order is the CPU's vector
width's, where eager's kernel sums them in a loop of its own (last bits off in 7 of 8
outputs and gradients under torch.compile).

Entered by ``decomp.upsample_nodes.eager_resample_kernels`` (which holds
``TRACE_LOCK``, since the kernels are process-wide). Imports torch and
``torchneuron.device.plain_paths``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._C import DispatchKey

from torchneuron.device import plain_paths

__all__ = ["WHILE_TRACING", "undecomposed"]

aten = torch.ops.aten
# (op, the dispatch key of its Python kernel, the kernel there while a trace runs: None
# for PyTorch's taken away)
WHILE_TRACING = (
    (aten.softshrink.default, DispatchKey.Autograd, None),
    (aten.hardshrink.default, DispatchKey.Autograd, None),
    (aten.multi_margin_loss.default, DispatchKey.Autograd, None),
    (aten.matmul.default, DispatchKey.CompositeImplicitAutograd, plain_paths.matmul),
)


@contextlib.contextmanager
def undecomposed() -> Iterator[None]:
    """While inside: the ops of ``WHILE_TRACING`` have the Python kernel it names at their
    key, or none (PyTorch's restored after)."""
    saved: list[tuple[Any, Any, Any]] = []
    for op, key, ours in WHILE_TRACING:
        saved.append((op, key, op.py_kernels.pop(key, None)))
        if ours is not None:
            op.py_kernels[key] = ours
        op._dispatch_cache.clear()
    try:
        yield
    finally:
        for op, key, theirs in saved:
            op.py_kernels.pop(key, None)
            if theirs is not None:
                op.py_kernels[key] = theirs
            op._dispatch_cache.clear()
