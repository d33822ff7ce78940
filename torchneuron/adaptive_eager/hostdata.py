"""Tensors from host data (``torch.tensor(data, device="neuron")``) under the mode.

PyTorch 2.13 fails an internal assert (``func != nullptr``, python_dispatch.cpp) when
``torch.tensor``, ``torch.as_tensor`` or ``torch.asarray`` build a tensor on a Python
PrivateUse1 device while any TorchDispatchMode is active. While adaptive eager is enabled
these three are wrapped: the tensor is built on the CPU, then copied to the device (the
same values, copied at the moment of the call, as a host-to-device copy is). Everything
else passes through to PyTorch unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["install", "uninstall"]

_NAMES = ("tensor", "as_tensor", "asarray")
_originals: dict[str, Callable[..., Any]] = {}


def _is_neuron(device: Any) -> bool:
    if device is None:
        return False
    try:
        return torch.device(device).type == "neuron"
    except (RuntimeError, TypeError):
        return False


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def build(data: Any, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        if not _is_neuron(device) or isinstance(data, torch.Tensor):
            return original(data, *args, **kwargs)
        requires_grad = bool(kwargs.pop("requires_grad", False))
        kwargs.pop("pin_memory", None)
        kwargs["device"] = "cpu"
        t = original(data, *args, **kwargs).to(device)
        return t.requires_grad_() if requires_grad else t

    build.__torchneuron_original__ = original  # type: ignore[attr-defined]
    return build


def install() -> None:
    for name in _NAMES:
        if name not in _originals:
            _originals[name] = getattr(torch, name)
            setattr(torch, name, _wrap(_originals[name]))


def uninstall() -> None:
    for name, original in list(_originals.items()):
        setattr(torch, name, original)
        del _originals[name]
