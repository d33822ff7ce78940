"""Checkpoints of neuron tensors: ``torch.save`` / ``torch.load`` the way CUDA's work.

Why this shape: PyTorch tags every saved storage with a *location* (``"cpu"``,
``"cuda:0"``) and restores it through ``map_location`` or the device's registered
deserializer (``torch.serialization.register_package``). A neuron tensor is saved
exactly as a CPU tensor over its buffer (``torch._utils._rebuild_tensor_v2``, a
safe global of every torch), but its storage is tagged ``"neuron:N"``. So:

- a process *without* torchneuron loads the checkpoint with
  ``map_location="cpu"`` (a string, a ``torch.device``, a dict or a callable), as
  it loads a CUDA checkpoint on a CPU-only machine; without ``map_location`` it
  gets PyTorch's "don't know how to restore data location" error;
- with torchneuron, ``map_location=None`` or ``"neuron[:N]"`` gives neuron tensors,
  and ``map_location="cpu"`` gives CPU tensors;
- views saved together stay views of one storage after loading.

The device has no allocator of its own (a neuron tensor's values live in a host
buffer), so a loaded storage bound for ``neuron:N`` stays in host memory and is
marked as device memory (``_DeviceHostStorage``, whose ``device`` is ``neuron:N``);
``_rebuild_tensor_v2`` then makes an empty neuron tensor and ``set_``s it onto that
storage, which the eager dispatcher turns into the tensor's buffer.
``torch.UntypedStorage(n, device="neuron")``, which would need that allocator (and
crashes the process without one), raises an error saying what to do instead.
"""

from __future__ import annotations

import collections
from typing import Any

import torch

from torchneuron.device.tensor import NeuronTensor, neuron_device

__all__ = ["register_serialization", "reduce_neuron_tensor"]

_MARK = "_neuron_location"  # attribute on a host storage that is neuron memory
_PRIORITY = 9  # before the CPU tagger (10): our storages are host storages


class _DeviceHostStorage(torch.UntypedStorage):
    """A host storage restored from a checkpoint as neuron device memory."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device(getattr(self, _MARK))

    def clone(self) -> torch.UntypedStorage:  # type: ignore[override]
        """A host copy of these bytes, marked as this one is.

        Why: the storage stays the buffer's for as long as the loaded tensor lives, and
        ``UntypedStorage.clone`` allocates on ``self.device``, which the device refuses
        (it has no allocator). Whoever copies a buffer's storage (the verification of a
        compiled graph's or a replayed region's first run; ``copy.deepcopy`` of a buffer)
        got that refusal for every tensor loaded from a checkpoint: a region reading the
        optimizer state that ``load_state_dict`` restored never replayed."""
        copy = torch.UntypedStorage(self.nbytes()).copy_(self)
        setattr(copy, _MARK, getattr(self, _MARK))
        copy.__class__ = _DeviceHostStorage
        return copy


def reduce_neuron_tensor(t: NeuronTensor, protocol: int) -> tuple:
    """``__reduce_ex__``: pickle as CPU PyTorch pickles the buffer, storage tagged neuron."""
    from torchneuron.hardware import get_core

    get_core(t._device_index).synchronize()  # the host reads device memory: wait for it
    buffer = t.buffer
    rebuild, args = torch.Tensor.__reduce_ex__(buffer, protocol)[:2]
    if rebuild is not torch._utils._rebuild_tensor_v2:  # pragma: no cover - torch changed
        raise RuntimeError(f"cannot save a neuron tensor: torch pickles its buffer with {rebuild}")
    storage = args[0]._untyped_storage
    setattr(storage, _MARK, str(t.device))
    args = (*args[:4], t.requires_grad, collections.OrderedDict(), *args[6:])
    if getattr(t, "_is_param", False):
        return (torch._utils._rebuild_parameter, (rebuild(*args), t.requires_grad, args[5]))
    return rebuild, args


def _tag(storage: Any) -> str | None:
    return getattr(storage, _MARK, None)


def _deserialize(storage: Any, location: str) -> Any:
    if not location.startswith("neuron"):
        return None
    from torchneuron.device.current import device_index

    device = neuron_device(device_index(location))
    if storage.device.type != "cpu":
        storage = storage.cpu()
    setattr(storage, _MARK, str(device))
    storage.__class__ = _DeviceHostStorage
    return storage


def _refuse_storage_on_neuron(new: Any) -> Any:
    """Wrap ``UntypedStorage.__new__``: refuse ``device="neuron"`` with a message, not a crash."""

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "neuron":
            raise RuntimeError(
                "torch.UntypedStorage cannot be allocated on the neuron device: a neuron "
                "tensor keeps its values in a host buffer, with no device allocator behind "
                "storages. Create a tensor instead, e.g. torch.empty(nbytes, "
                "dtype=torch.uint8, device='neuron'), or move a CPU tensor with .to('neuron')."
            )
        return new(cls, *args, **kwargs)

    __new__._torchneuron_wrapped = True  # type: ignore[attr-defined]
    return __new__


def register_serialization() -> None:
    """Install the neuron location tag, its deserializer and the storage guard (idempotent)."""
    NeuronTensor.__reduce_ex__ = reduce_neuron_tensor  # type: ignore[method-assign, assignment]
    registry = torch.serialization._package_registry
    if not any(entry[1] is _tag for entry in registry):
        torch.serialization.register_package(_PRIORITY, _tag, _deserialize)
    new = torch.UntypedStorage.__new__
    if not getattr(new, "_torchneuron_wrapped", False):
        torch.UntypedStorage.__new__ = staticmethod(_refuse_storage_on_neuron(new))  # type: ignore[assignment]
