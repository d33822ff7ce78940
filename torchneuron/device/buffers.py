"""Accounting of device buffers against the simulated HBM.

A neuron tensor's memory is its buffer's *storage*: views share it and must not
count twice. We count each storage once, from the first wrapper that holds it to
the last wrapper's death (a token in the wrapper's ``__dict__`` whose ``__del__``
releases it: no weakref, so ``torch.utils.swap_tensors`` and ``Module.to`` keep
working), keyed by the storage's data
pointer. Each entry remembers the core it was charged to, so a storage allocated
before ``torchneuron.hardware.reset()`` is released on the core that counted it,
never on its fresh successor. Allocation is checked *before* a factory op materializes its result, so an
oversized request raises ``torch.OutOfMemoryError`` and leaves state intact.
"""

from __future__ import annotations

import torch

from torchneuron.hardware import NeuronCore, get_core

__all__ = ["track", "storage_nbytes", "live_storages"]


class _Entry:
    """One accounted storage: how many wrappers hold it, its bytes, the core charged."""

    __slots__ = ("refs", "nbytes", "core")

    def __init__(self, nbytes: int, core: NeuronCore) -> None:
        self.refs = 1
        self.nbytes = nbytes
        self.core = core


# (device index, storage data_ptr) -> entry
_live: dict[tuple[int, int], _Entry] = {}


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
        entry.refs -= 1
        if entry.refs == 0:
            del _live[self.key]
            entry.core.memory.free(entry.nbytes)


def track(wrapper: torch.Tensor, buffer: torch.Tensor, index: int) -> None:
    """Account ``buffer``'s storage to device ``index`` for as long as ``wrapper`` lives."""
    storage = buffer.untyped_storage()
    nbytes = storage.nbytes()
    if nbytes == 0:
        return
    key = (index, storage.data_ptr())
    entry = _live.get(key)
    if entry is None:
        core = get_core(index)
        core.memory.allocate(nbytes)
        _live[key] = _Entry(nbytes, core)
    else:
        if nbytes > entry.nbytes:  # resized in place: account the growth
            entry.core.memory.allocate(nbytes - entry.nbytes)
            entry.nbytes = nbytes
        entry.refs += 1
    wrapper._memory_token = _Token(key)  # type: ignore[attr-defined]


def live_storages() -> int:
    return len(_live)
