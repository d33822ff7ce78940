"""The current neuron device, and a device argument made an index.

Kept apart from ``module`` (the ``torch.neuron`` API) because streams, RNG and
serialization need the index too, and ``module`` imports them: with the index here, none
of them imports ``module`` back.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.hardware import device_count

__all__ = ["current_device", "set_device", "device_index"]

_current = 0


def current_device() -> int:
    return _current


def device_index(dev: Any = None) -> int:
    """Normalize an int / str / torch.device / None to a neuron device index."""
    if dev is None:
        return _current
    if isinstance(dev, int):
        index = dev
    else:
        dev = torch.device(dev)
        if dev.type != "neuron":
            raise ValueError(f"Expected a neuron device, but got: {dev}")
        index = _current if dev.index is None else dev.index
    if not 0 <= index < device_count():
        raise RuntimeError(
            f"Invalid device ordinal neuron:{index}: this simulated chip has "
            f"{device_count()} NeuronCores (neuron:0 .. neuron:{device_count() - 1})"
        )
    return index


def set_device(dev: Any) -> None:
    global _current
    _current = device_index(dev)
