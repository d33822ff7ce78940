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

__all__ = ["attach", "defer_write", "mirror_bits", "track", "storage_nbytes", "live_storages"]


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


class _Token(tuple):
    """Released when the wrapper holding it dies; it is its storage's key.

    A tuple subclass: made by ``tuple``'s C constructor, with no Python ``__init__``
    frame (one is made for nearly every eager op's result)."""

    __slots__ = ()

    def __del__(self) -> None:
        entry = _live.get(self)
        if entry is None:
            return
        entry.refs -= 1
        if entry.refs == 0:
            del _live[self]
            entry.core.memory.free(entry.nbytes)


def track(wrapper: object, buffer: torch.Tensor, index: int) -> None:
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


def attach(wrapper: torch.Tensor, buffer: torch.Tensor, index: int) -> torch.Tensor:
    """Give ``wrapper`` its buffer: the one way a neuron tensor gets its values.

    Used by eager dispatch for a new tensor (``wrap``) and by a pending tensor's
    materialization. Accounts the buffer's storage against device ``index``'s HBM and
    mirrors the conj/neg bits, so memory statistics and autograd's view of the tensor
    are the same whichever path produced it. Returns ``wrapper``.
    """
    wrapper._buffer = buffer  # type: ignore[attr-defined]
    track(wrapper, buffer, index)
    mirror_bits(wrapper, buffer)
    return wrapper


def defer_write(wrapper: torch.Tensor, pending: object) -> None:
    """Mark a tensor that has a buffer as awaiting a deferred in-place write.

    ``pending`` (a ``tensor.Pending``) performs the write when anyone reads the buffer
    (``NeuronTensor.buffer``) before its producer has run; its producer clears the mark
    (``wrapper._pending = None``) when it writes the value itself.
    """
    wrapper._pending = pending  # type: ignore[attr-defined]


def mirror_bits(wrapper: torch.Tensor, buffer: torch.Tensor) -> None:
    """Carry the buffer's lazy conjugate / negative bits over to the wrapper.

    Why: ``conj()`` and ``_neg_view()`` are views that only set a bit. Autograd
    formulas (fft, complex ops) branch on ``is_conj()`` of the tensor they hold, the
    wrapper; if it disagreed with its buffer they would take the wrong branch.
    """
    if buffer.is_conj() and not wrapper.is_conj():
        torch._C._set_conj(wrapper, True)
    if buffer.is_neg() and not wrapper.is_neg():
        torch._C._set_neg(wrapper, True)
