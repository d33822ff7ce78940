"""``Module.to("neuron")`` for the modules PyTorch's generic path cannot move.

Why: ``nn.Module._apply`` moves a parameter to a tensor *subclass* device with
``torch.utils.swap_tensors``, which needs the parameter to be referenced from
Python only. Three kinds of modules break that, although CUDA moves them fine
(through ``param.data = ...``, impossible between a host tensor and a wrapper
subclass):

- **scripted modules** (``torch.jit.script(m).to("neuron")``): the C++ module
  holds a second reference to each parameter. We give the module new
  ``Parameter`` objects instead, which is what ``Module._apply`` itself does for
  tensor types ``.data`` cannot take.
- **lazy modules** (``nn.LazyConv2d().to("neuron")``): an uninitialized parameter
  keeps its device in its empty data. We leave the placeholder on the host,
  remember the device on it, and ``materialize`` creates the value on the neuron
  device, so ``reset_parameters`` then initializes it with the device's generator,
  as on CUDA.
- **parameters a live autograd graph holds**: ``out = lstm(x)`` on the host saves
  the weights themselves for the backward (``mkldnn_rnn_layer``, ``convolution``),
  so while ``out`` lives ``lstm.to("neuron")`` failed with "Couldn't swap
  LSTM.weight_ih_l0" (CUDA moves them with ``.data =``). Those parameters get new
  ``Parameter`` objects on the device, as ``Module._apply`` gives any tensor type
  ``.data =`` cannot take; the others keep their identity through the swap. The
  old graph keeps the host parameters it saved (its backward reaches those).
"""


from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedTensorMixin, is_lazy

from torchneuron.device.tensor import NeuronTensor

__all__ = ["install_module_conversion"]

_ATTR = "_torchneuron_device"


def _target(module: torch.nn.Module, fn: Callable) -> torch.device | None:
    """The neuron device ``fn`` moves tensors to, or None (probed on an empty tensor)."""
    try:
        with torch.no_grad():
            probe = fn(torch.empty(0))
    except Exception:  # noqa: BLE001 - not a device conversion we can tell apart
        return None
    return probe.device if isinstance(probe, NeuronTensor) else None


def _script_apply(original: Callable) -> Callable:
    def _apply(self: Any, fn: Callable, recurse: bool = True) -> Any:
        tensors = [*self.parameters(), *self.buffers()]
        if _target(self, fn) is None and not any(isinstance(t, NeuronTensor) for t in tensors):
            return original(self, fn, recurse)
        if recurse:
            for child in self.children():
                child._apply(fn)
        for key, param in self._parameters.items():
            if param is None:
                continue
            with torch.no_grad():
                new = torch.nn.Parameter(fn(param), param.requires_grad)
                if param.grad is not None:
                    new.grad = fn(param.grad)
            self._parameters[key] = new
        for key, buf in self._buffers.items():
            if buf is not None:
                self._buffers[key] = fn(buf)
        return self

    _apply._torchneuron = True  # type: ignore[attr-defined]
    return _apply


def _swap_refused(t: torch.Tensor) -> bool:
    """Whether ``torch.utils.swap_tensors`` would refuse ``t`` for other references to
    its TensorImpl: more than one, unless the second is its gradient accumulator."""
    count = t._use_count()
    if count <= 1:
        return False
    if count > 2 or not t.is_leaf:
        return True
    node = torch.autograd.graph.get_gradient_edge(t).node  # (made here if it was not)
    refused = t._use_count() != 2
    del node
    return refused


def _held_apply(original: Callable) -> Callable:
    def _apply(self: Any, fn: Callable, recurse: bool = True) -> Any:
        held = [k for k, p in self._parameters.items()
                if p is not None and not isinstance(p, NeuronTensor) and _swap_refused(p)]
        if held and _target(self, fn) is not None:
            for key in held:
                param = self._parameters[key]
                with torch.no_grad():
                    new = torch.nn.Parameter(fn(param), param.requires_grad)
                    if param.grad is not None:
                        new.grad = fn(param.grad)
                self._parameters[key] = new
        return original(self, fn, recurse)

    _apply._torchneuron = True  # type: ignore[attr-defined]
    return _apply


def _lazy_apply(self: Any, fn: Callable, recurse: bool = True) -> Any:
    target = _target(self, fn)
    slots = [self._parameters, self._buffers]
    hidden = [(d, k, t) for d in slots for k, t in d.items() if t is not None and is_lazy(t)]
    for _, _, t in hidden:
        setattr(t, _ATTR, target)
    if target is None:
        return torch.nn.Module._apply(self, fn, recurse)
    for d, k, _ in hidden:
        d[k] = None
    try:
        return torch.nn.Module._apply(self, fn, recurse)
    finally:
        for d, k, t in hidden:
            d[k] = t


def _materialize(original: Callable) -> Callable:
    def materialize(self: Any, shape: Any, device: Any = None, dtype: Any = None) -> None:
        target = getattr(self, _ATTR, None)
        if target is None or device is not None:
            return original(self, shape, device, dtype)
        original(self, shape, "cpu", dtype)  # torch.empty: no values drawn yet
        moved = self.detach().to(target)
        if isinstance(self, torch.nn.Parameter):
            moved = torch.nn.Parameter(moved, self.requires_grad)
        torch.utils.swap_tensors(self, moved)
        return None

    materialize._torchneuron = True  # type: ignore[attr-defined]
    return materialize


def install_module_conversion() -> None:
    """Patch ``Module._apply``, ``RecursiveScriptModule._apply`` and lazy modules
    (idempotent)."""
    script = torch.jit.RecursiveScriptModule
    if not getattr(script._apply, "_torchneuron", False):  # (before Module's, it inherits)
        script._apply = _script_apply(script._apply)  # type: ignore[method-assign]
    if not getattr(torch.nn.Module._apply, "_torchneuron", False):
        torch.nn.Module._apply = _held_apply(torch.nn.Module._apply)  # type: ignore[method-assign]
    LazyModuleMixin._apply = _lazy_apply  # type: ignore[attr-defined]
    if not getattr(UninitializedTensorMixin.materialize, "_torchneuron", False):
        UninitializedTensorMixin.materialize = _materialize(UninitializedTensorMixin.materialize)  # type: ignore[method-assign]
