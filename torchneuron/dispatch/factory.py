"""Factory functions with ``device="neuron"`` (``torch.zeros``, ``torch.randn``, ...).

An op with no tensor arguments never reaches ``__torch_dispatch__``; the dispatcher
sends it to the PrivateUse1 backend key instead. A Python fallback on that key runs
it through the same eager path, after checking the allocation against the
simulated HBM *before* the host allocates anything.

``empty`` and ``empty_strided`` also get explicit PrivateUse1 kernels. Why:
``torch.tensor(data, device="neuron")`` (and ``as_tensor``, ``new_tensor``, ``.to``
from a host tensor) allocate with the Python and Fake keys excluded, so they land
here even while a dispatch mode is active, and torch 2.13 cannot route a boxed
Python *fallback* through an active mode (``func != nullptr`` INTERNAL ASSERT in
python_dispatch.cpp); a per-op kernel it can.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from torchneuron.dispatch.eager import _device_index, run_op
from torchneuron.hardware import get_core

__all__ = ["install"]

aten = torch.ops.aten
_lib: torch.library.Library | None = None
_libs: list[torch.library.Library] = []

def _requested_bytes(func: Any, args: tuple, kwargs: dict) -> int:
    if func in (aten.empty.memory_format, aten.empty_strided.default):
        size = args[0]
        dtype = kwargs.get("dtype") or torch.get_default_dtype()
        itemsize = torch.empty((), dtype=dtype).element_size()
        if func is aten.empty_strided.default:
            stride = args[1]
            if any(s == 0 for s in size):
                return 0
            extent = 1 + sum((n - 1) * st for n, st in zip(size, stride, strict=True))
            return extent * itemsize
        return math.prod(size) * itemsize
    return 0


_MODE_SAFE_FACTORIES = (aten.empty.memory_format, aten.empty_strided.default)


def _fallback(op: Any, *args: Any, **kwargs: Any) -> Any:
    index = _device_index(kwargs.get("device") or "neuron")
    nbytes = _requested_bytes(op, args, kwargs)
    memory = get_core(index).memory
    if nbytes and memory.allocated + nbytes > memory.capacity:
        memory.allocate(nbytes)  # raises torch.OutOfMemoryError naming the sizes
    return run_op(op, args, kwargs, index)


def install() -> None:
    """Register the PrivateUse1 fallback (idempotent)."""
    global _lib
    if _lib is None:
        _lib = torch.library.Library("_", "IMPL")
        _lib.fallback(_fallback, dispatch_key="PrivateUse1")
        aten_lib = torch.library.Library("aten", "IMPL")
        for op in _MODE_SAFE_FACTORIES:
            aten_lib.impl(op, functools.partial(_fallback, op), "PrivateUse1")
        _libs.append(aten_lib)
