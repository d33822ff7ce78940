"""``torch.accelerator`` answers for the neuron device (synchronize, memory, device index).

Why: with torchneuron imported, ``neuron`` is PyTorch's current accelerator, and
device-generic code calls ``torch.accelerator.synchronize()`` or
``torch.accelerator.memory_allocated()``. In C++ those reach the device guard and
a ``DeviceAllocator``, which a backend registered from Python (PyTorch's
``torch._C._acc`` hooks) cannot provide, so they raised for every user. The
Python functions of ``torch.accelerator`` are therefore routed to ``torch.neuron``
while the current accelerator is ``neuron`` (and left to PyTorch otherwise).
``torch.accelerator.current_stream()`` already works (the default stream).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.accelerator as _acc
import torch.accelerator.memory as _acc_memory
from torch.accelerator._utils import _get_device_index

from torchneuron.device import module as neuron
from torchneuron.hardware import get_core

__all__ = ["install_accelerator_bridge"]


def _index(device: Any) -> int:
    return _get_device_index(device, optional=True)


def _memory_stats(device: Any = None, /) -> collections.OrderedDict[str, Any]:
    return collections.OrderedDict(sorted(neuron.memory_stats(_index(device)).items()))


def _get_memory_info(device: Any = None, /) -> tuple[int, int]:
    mem = get_core(_index(device)).memory
    return mem.free_bytes, mem.capacity


_OURS: dict[str, Callable[..., Any]] = {
    "synchronize": lambda device=None, /: neuron.synchronize(_index(device)),
    "current_device_index": neuron.current_device,
    "set_device_index": lambda device, /: neuron.set_device(_index(device)),
    "memory_stats": _memory_stats,
    "empty_cache": neuron.empty_cache,
    "reset_peak_memory_stats": lambda device=None, /: neuron.reset_peak_memory_stats(
        _index(device)
    ),
    "reset_accumulated_memory_stats": lambda device=None, /: None,  # nothing accumulated
    "get_memory_info": _get_memory_info,
}


def _routed(original: Callable[..., Any], ours: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def route(*args: Any, **kwargs: Any) -> Any:
        acc = torch._C._accelerator_getAccelerator()
        if acc is not None and acc.type == "neuron":
            return ours(*args, **kwargs)
        return original(*args, **kwargs)

    route._torchneuron = True  # type: ignore[attr-defined]
    return route


def install_accelerator_bridge() -> None:
    """Route ``torch.accelerator``'s functions to ``torch.neuron`` (idempotent)."""
    for name, ours in _OURS.items():
        for mod in (_acc, _acc_memory):
            original = getattr(mod, name, None)
            if original is None or getattr(original, "_torchneuron", False):
                continue
            setattr(mod, name, _routed(original, ours))
