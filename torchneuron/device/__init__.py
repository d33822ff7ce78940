"""The PyTorch ``neuron`` device.

Owns: the PrivateUse1 registration (renamed ``neuron``), the tensor type and its
buffers (real or pending), buffer accounting against the simulated HBM, the
device's random generators, and the ``torch.neuron`` module API. Imports
``torchneuron.hardware`` only; what running an op means is installed from above
by ``torchneuron.dispatch`` (``set_op_handler``).
"""

import torch

from torchneuron.device import module
from torchneuron.device._registration import register
from torchneuron.device.tensor import NeuronTensor, neuron_device, set_op_handler


def _rebuild_neuron_tensor(
    buffer: torch.Tensor, index: int, requires_grad: bool
) -> torch.Tensor:
    """Unpickle a neuron tensor saved with ``torch.save`` (its values travel as CPU data)."""
    return buffer.to(neuron_device(index)).requires_grad_(requires_grad)


def _reduce_ex(self: NeuronTensor, protocol: int) -> tuple:
    return (_rebuild_neuron_tensor, (self.detach().cpu(), self._device_index, self.requires_grad))


def _tolist(self: NeuronTensor) -> object:
    """``Tensor.tolist`` refuses tensor subclasses; read the values back through ``.cpu()``
    (an op, so the device sees the read), then convert as PyTorch does."""
    return self.detach().cpu().tolist()


NeuronTensor.__reduce_ex__ = _reduce_ex  # type: ignore[method-assign]
NeuronTensor.tolist = _tolist  # type: ignore[method-assign]
torch.serialization.add_safe_globals([_rebuild_neuron_tensor])

__all__ = ["NeuronTensor", "neuron_device", "set_op_handler", "register", "module"]
