"""FSDP2's storage free and re-allocation, for neuron tensors.

Why: ``fully_shard`` frees an unsharded parameter after forward (and after backward) by
``tensor.untyped_storage().resize_(0)`` and brings it back with ``resize_(nbytes)`` before
the next all-gather (``_fsdp_param.free_storage`` / ``alloc_storage``). A neuron tensor is a
wrapper subclass: its own storage holds no data, and PyTorch refuses ``resize_`` on it
("Attempted to call resize_() on an invalid python storage") from C++, where a Python backend
cannot intervene, and the wrapper's ``untyped_storage()`` must stay the wrapper's (Dynamo and
AOTAutograd read it). The values live in the wrapper's CPU buffer, whose storage *can* be
resized in place (views over it follow, as views over a CUDA storage do), so FSDP2's two
helpers are given neuron-aware versions: for a neuron tensor they resize the buffer's storage
and move the simulated HBM accounting with it (``device.buffers.resize_storage``); any other
tensor goes to PyTorch's own helper. This replaces two module-level functions of FSDP2
(``torch.distributed.fsdp._fully_shard._fsdp_param`` and ``_fsdp_param_group``), installed when
the first neuron process group is created, so processes that never use FSDP pay nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from torchneuron.device import buffers
from torchneuron.device.tensor import NeuronTensor
from torchneuron.hardware import get_core

__all__ = ["install_storage_resize"]

_installed = False


def _settle(tensor: NeuronTensor) -> None:
    """A sync point before the storage changes size: work a mode above has deferred (adaptive
    eager's regions) runs first, while the storage still holds the values it reads."""
    get_core(tensor._device_index).notify_sync("storage-resize")


def _wrap_alloc(original: Callable[[torch.Tensor], None]) -> Callable[[torch.Tensor], None]:
    def alloc_storage(tensor: torch.Tensor) -> None:
        """FSDP2's ``alloc_storage``: a neuron tensor's buffer storage regrows to its size."""
        if isinstance(tensor, NeuronTensor):
            _settle(tensor)
            buffers.resize_storage(tensor, tensor.numel() * tensor.itemsize)
        else:
            original(tensor)

    return alloc_storage


def _wrap_free(original: Callable[[torch.Tensor], None]) -> Callable[[torch.Tensor], None]:
    def free_storage(tensor: torch.Tensor) -> None:
        """FSDP2's ``free_storage``: a neuron tensor's buffer storage shrinks to 0 bytes."""
        if isinstance(tensor, NeuronTensor):
            _settle(tensor)
            buffers.resize_storage(tensor, 0)
        else:
            original(tensor)

    return free_storage


def install_storage_resize() -> None:
    """Give FSDP2 the neuron-aware storage helpers (idempotent)."""
    global _installed
    if _installed:
        return
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group

    alloc = _wrap_alloc(_fsdp_param.alloc_storage)
    free = _wrap_free(_fsdp_param.free_storage)
    _fsdp_param.alloc_storage = alloc
    _fsdp_param.free_storage = free
    _fsdp_param_group.alloc_storage = alloc  # imported there by name
    _installed = True

