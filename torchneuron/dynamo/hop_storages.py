"""Dynamo's aliasing check of ``while_loop``'s inputs reads a neuron tensor's storage.

Why: tracing ``while_loop`` (which eager ``while_loop`` does too), Dynamo collects the
storages of its inputs to find the ones the body mutates, and refuses every tensor
subclass ("get_tensor_storages does not support traceable wrapper subclasses"). A neuron
tensor's values are its buffer, one strided tensor: the buffer's storage is the answer.
Installed when Dynamo's module loads (importing Dynamo costs seconds; ``skip`` does the
same for its skip list).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["MODULE", "patch"]

MODULE = "torch._dynamo.variables.higher_order_ops"


def _buffer_storages(inner: Callable[[Any], Any]) -> Callable[[Any], Any]:
    from torchneuron.device.tensor import NeuronTensor

    def get_tensor_storages(tensor: Any) -> Any:
        if isinstance(tensor, NeuronTensor):
            return inner(tensor._buffer)
        return inner(tensor)

    get_tensor_storages._neuron = True  # type: ignore[attr-defined]
    return get_tensor_storages


def patch(module: ModuleType) -> None:
    """Wrap ``module.get_tensor_storages`` (idempotent; absent in other torch versions)."""
    inner = getattr(module, "get_tensor_storages", None)
    if inner is not None and not getattr(inner, "_neuron", False):
        module.get_tensor_storages = _buffer_storages(inner)  # type: ignore[attr-defined]
