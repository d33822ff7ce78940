"""Accounting of device buffers against the simulated HBM.

A neuron tensor's memory is its buffer's *storage*: views share it and must not
count twice. We count each storage once, from the first wrapper that holds it to
the last wrapper's death (a token in the wrapper's ``__dict__`` whose ``__del__``
releases it: no weakref, so ``torch.utils.swap_tensors`` and ``Module.to`` keep
working), keyed by the storage's data
pointer. Allocation is checked *before* a factory op materializes its result, so an
oversized request raises ``torch.OutOfMemoryError`` and leaves state intact.
"""

from __future__ import annotations

import torch

from torchneuron.hardware import get_core

__all__ = ["track", "storage_nbytes", "live_storages"]

# (device index, storage data_ptr) -> [wrapper refcount, accounted bytes]
_live: dict[tuple[int, int], list[int]] = {}


def storage_nbytes(buffer: torch.Tensor) -> int:
    return buffer.untyped_storage().nbytes()


class _Token:
    """Released when the wrapper holding it dies."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[int, int]) -> None:
        self.key = key

    def __del__(self) -> None:
        entry = _live.get(self.key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            del _live[self.key]
            get_core(self.key[0]).memory.free(entry[1])


def track(wrapper: torch.Tensor, buffer: torch.Tensor, index: int) -> None:
    """Account ``buffer``'s storage to device ``index`` for as long as ``wrapper`` lives."""
    storage = buffer.untyped_storage()
    nbytes = storage.nbytes()
    if nbytes == 0:
        return
    key = (index, storage.data_ptr())
    entry = _live.get(key)
    if entry is None:
        get_core(index).memory.allocate(nbytes)
        _live[key] = [1, nbytes]
    else:
        entry[0] += 1
        if nbytes > entry[1]:  # resized in place: account the growth
            get_core(index).memory.allocate(nbytes - entry[1])
            entry[1] = nbytes
    wrapper._memory_token = _Token(key)  # type: ignore[attr-defined]


def live_storages() -> int:
    return len(_live)
