"""Accounting of device buffers against the simulated HBM.

A neuron tensor's memory is its buffer's *storage*: views share it and must not
count twice. We count each storage once, from the first wrapper that holds it to
the last wrapper's death: every wrapper over the storage holds the same token in its
``__dict__``, so Python's reference count is the count of wrappers, and the token's
``__del__`` releases the storage (no weakref to the wrapper, so
``torch.utils.swap_tensors`` and ``Module.to`` keep working). Tokens are found by the
storage's data pointer through weak references. Each token remembers the core it was
charged to, so a storage allocated before ``torchneuron.hardware.reset()`` is released
on the core that counted it, never on its fresh successor. Allocation is checked
*before* a factory op materializes its result, so an oversized request raises
``torch.OutOfMemoryError`` and leaves state intact.
"""

from __future__ import annotations

import contextlib
import weakref

import torch

from torchneuron.hardware import NeuronCore, get_core

__all__ = ["defer_write", "mirror_bits", "track", "storage_nbytes", "live_storages",
           "resize_storage", "Holding", "hold"]


class _Token:
    """One accounted storage, held by every wrapper over it: its key, bytes, the core charged.

    Why shared, not one per wrapper: a view (and nearly every eager op's result is a new
    wrapper) then costs no new object and its death no ``__del__``; only the storage's
    last wrapper runs one.
    """

    __slots__ = ("key", "nbytes", "core", "__weakref__")

    def __init__(self, key: tuple[int, int], nbytes: int, core: NeuronCore) -> None:
        self.key = key
        self.nbytes = nbytes
        self.core = core

    def __del__(self) -> None:
        if _live is None:  # interpreter shutdown has cleared this module's globals
            return
        ref = _live.get(self.key)
        if ref is not None:
            held = ref()
            # None: the garbage collector cleared the reference before finalizing
            if held is self or held is None:
                del _live[self.key]
        self.core.memory.free(self.nbytes)


# (device index, storage data_ptr) -> the storage's token (weakly: wrappers keep it alive)
_live: dict[tuple[int, int], weakref.ref[_Token]] = {}


def storage_nbytes(buffer: torch.Tensor) -> int:
    return buffer.untyped_storage().nbytes()


def track(wrapper: object, buffer: torch.Tensor, index: int) -> None:
    """Account ``buffer``'s storage to device ``index`` for as long as ``wrapper`` lives."""
    storage = buffer.untyped_storage()
    nbytes = storage.nbytes()
    if nbytes == 0:
        # nothing to account; a previous buffer's token (``set_``, ``.data =`` an empty
        # tensor) must not keep that storage counted through this wrapper
        # (a deferred replay value has __slots__, no __dict__: delete the attribute itself)
        with contextlib.suppress(AttributeError):
            del wrapper._memory_token  # type: ignore[attr-defined]
        return
    key = (index, storage.data_ptr())
    ref = _live.get(key)
    token = ref() if ref is not None else None
    if token is None:
        if _holding is None or key not in _holding.nbytes:
            core = get_core(index)
            core.memory.allocate(nbytes)
            token = _Token(key, nbytes, core)
            _live[key] = weakref.ref(token)
            wrapper._memory_token = token  # type: ignore[attr-defined]
            return
        token = _holding.token_of(key)  # held by a run (``Holding``): counted there
    if nbytes > token.nbytes:  # resized in place: account the growth
        token.core.memory.allocate(nbytes - token.nbytes)
        token.nbytes = nbytes
    wrapper._memory_token = token  # type: ignore[attr-defined]


class Holding:
    """The storages one run of deferred ops makes that no wrapper holds (``hold``), counted
    from then until the run ends (``release``), as a wrapper apiece would count them.

    Why not a wrapper (or a small holder) per buffer: a run holds every value its ops make
    until it ends, and a holder, its token and the token's weak reference are three
    objects the garbage collector tracks, per value: a first-tier replay of a training
    step held enough of them for a collection every step, where eager, which frees each
    value when its last wrapper dies, ran none. Here a held storage is a dict entry.

    A storage counted here is found by ``track`` too (a view of it that a pending value
    or a wrapper takes): it then gets its token, with its bytes (nothing is counted
    twice), and the holding keeps that token until the run ends. The run keeps its
    buffers alive until then, so no address of a held storage is reused meanwhile.
    ``start`` and ``stop`` bracket the run; ``release`` ends the counting."""

    __slots__ = ("nbytes", "tokens", "core", "outer")

    def __init__(self) -> None:
        self.nbytes: dict[tuple[int, int], int] = {}  # held storage -> bytes counted
        self.tokens: list[_Token] = []  # tokens of storages the run holds: kept to its end
        self.core: NeuronCore | None = None  # the core the held bytes are counted on
        self.outer: Holding | None = None  # the holding of a run this one is inside

    def start(self) -> Holding:
        """Count the storages held from here on (``hold``), until ``stop``."""
        global _holding
        self.outer = _holding
        _holding = self
        return self

    def stop(self) -> None:
        """No more storages are held here; those held stay counted until ``release``
        (or until the holding dies: a run that raised is held by the error's traceback,
        as its buffers' holders were)."""
        global _holding
        _holding = self.outer

    def release(self) -> None:
        """The held storages are no longer counted; the tokens kept are dropped."""
        if self.nbytes:
            free = self.core.memory.free  # type: ignore[union-attr]
            for n in self.nbytes.values():
                free(n)
            self.nbytes.clear()
        self.tokens.clear()

    def __del__(self) -> None:
        if self.nbytes:
            self.release()

    def token_of(self, key: tuple[int, int]) -> _Token:
        """The held storage ``key`` gets a token (a wrapper now holds it too), with the
        bytes it is counted for; the holding keeps the token until it ends."""
        token = _Token(key, self.nbytes.pop(key), self.core)  # type: ignore[arg-type]
        _live[key] = weakref.ref(token)
        self.tokens.append(token)
        return token


_holding: Holding | None = None  # the innermost run holding storages (``Holding.start``)


def hold(buffer: torch.Tensor, index: int) -> None:
    """Count ``buffer``'s storage on device ``index`` until the current run's holding is
    released (``Holding``): the accounting ``track`` gives a wrapper, without one. A storage a
    wrapper counts already is kept counted until then (its token is held)."""
    h = _holding
    storage = buffer.untyped_storage()
    nbytes = storage.nbytes()
    if nbytes == 0:
        return
    key = (index, storage.data_ptr())
    ref = _live.get(key)
    token = ref() if ref is not None else None
    if token is not None:  # (as ``track``: shared, its growth counted)
        if nbytes > token.nbytes:
            token.core.memory.allocate(nbytes - token.nbytes)
            token.nbytes = nbytes
        h.tokens.append(token)  # type: ignore[union-attr]
        return
    held = h.nbytes  # type: ignore[union-attr]
    n = held.get(key)
    if n is None:
        core = h.core  # type: ignore[union-attr]
        if core is None:
            core = h.core = get_core(index)  # type: ignore[union-attr]
        core.memory.allocate(nbytes)
        held[key] = nbytes
    elif nbytes > n:
        h.core.memory.allocate(nbytes - n)  # type: ignore[union-attr]
        held[key] = nbytes


def resize_storage(wrapper: torch.Tensor, nbytes: int) -> None:
    """Resize the storage under ``wrapper``'s buffer in place to ``nbytes``; the HBM
    accounting follows (growth is checked first, so an oversized request raises
    ``torch.OutOfMemoryError`` and changes nothing).

    Why: FSDP2 frees an unsharded parameter by resizing its storage to 0 bytes and brings it
    back before the next all-gather; the wrapper's own storage holds no data, the buffer's
    does, and every view over the buffer follows the resize (``distributed.fsdp``).
    """
    buffer = wrapper.buffer  # type: ignore[attr-defined]
    index = wrapper._device_index  # type: ignore[attr-defined]
    storage = buffer.untyped_storage()
    old = storage.nbytes()
    nbytes = int(nbytes)
    if old == nbytes:
        return
    token = wrapper.__dict__.get("_memory_token")
    core = token.core if token is not None else get_core(index)
    if nbytes > old:
        core.memory.allocate(nbytes - old)
    if token is not None:  # the storage moves: it is no longer found under its old pointer
        ref = _live.get(token.key)
        if ref is not None and ref() is token:
            del _live[token.key]
    storage.resize_(nbytes)
    if nbytes < old:
        core.memory.free(old - nbytes)
    if token is None:
        token = _Token((index, -1), 0, core)
        wrapper._memory_token = token  # type: ignore[attr-defined]
    token.nbytes = nbytes
    token.key = (index, storage.data_ptr()) if nbytes else (index, -id(token))
    if nbytes:
        _live[token.key] = weakref.ref(token)


def live_storages() -> int:
    return len(_live)


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
