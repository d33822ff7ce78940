"""Registration of the ``neuron`` device with PyTorch (PrivateUse1, renamed).

Uses PyTorch's Python path for PrivateUse1 backends: the rename, the generated
``Tensor.neuron()`` / ``Module.neuron()`` methods, the device module
(``torch.neuron``), and the hooks and device guard that make
``torch.accelerator`` report the neuron device.
"""

from __future__ import annotations

import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from torchneuron.device import module as neuron_module

_registered = False


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):  # noqa: ANN201
        return torch._C._autograd.DeviceType.PrivateUse1


def register() -> None:
    """Make ``torch.device("neuron")`` and ``torch.neuron`` exist (idempotent)."""
    global _registered
    if _registered:
        return
    _setup_privateuseone_for_python_backend(
        rename="neuron", backend_module=neuron_module, hook=_Hooks(), device_guard=_Guard()
    )
    _registered = True
