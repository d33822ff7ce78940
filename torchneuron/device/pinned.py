"""Pinned host memory for the neuron device (``Tensor.pin_memory``, ``DataLoader(pin_memory=True)``).

Why: once ``neuron`` is PyTorch's current accelerator, ``tensor.pin_memory()``
asks the accelerator's hooks for a pinned-memory allocator, which PyTorch's
Python hooks for PrivateUse1 cannot provide, so pinning failed for every user
of the process. On a real device, pinned (page-locked) host memory makes
host-to-device DMA possible without a staging copy; the simulated device reads
any host memory, so a pinned tensor is a fresh host copy that we remember as
pinned (``is_pinned()`` is True for it and its views, as on CUDA, for as long
as the tensor ``pin_memory`` returned lives). Pinning for another accelerator named explicitly
(``pin_memory(device="cuda")``) is left to PyTorch.

The kernels are registered for the CPU key of ``aten::_pin_memory`` and
``aten::is_pinned`` (PyTorch has only composite kernels there).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

__all__ = ["register_pinned_memory"]

_pinned: dict[int, int] = {}  # storage data_ptr -> number of live pinned tensors over it
_COMPOSITE = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


def _ours(device: Any) -> bool:
    return device is None or torch.device(device).type == "neuron"


def _release(ptr: int) -> None:
    _pinned[ptr] -= 1
    if _pinned[ptr] == 0:
        del _pinned[ptr]


def _pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    if not _ours(device):
        return torch.ops.aten._pin_memory.default.redispatch(_COMPOSITE, self, device)
    out = torch.empty_like(self, memory_format=torch.contiguous_format)
    out.copy_(self)
    ptr = out.untyped_storage().data_ptr()
    if ptr:
        _pinned[ptr] = _pinned.get(ptr, 0) + 1
        weakref.finalize(out, _release, ptr)
    return out


def _is_pinned(self: torch.Tensor, device: Any = None) -> bool:
    if not _ours(device):
        return torch.ops.aten.is_pinned.default.redispatch(_COMPOSITE, self, device)
    return self.untyped_storage().data_ptr() in _pinned


def register_pinned_memory(lib: torch.library.Library) -> None:
    lib.impl("_pin_memory", _pin_memory, "CPU")
    lib.impl("is_pinned", _is_pinned, "CPU")
