"""The PyTorch ``neuron`` device.

Owns: the PrivateUse1 registration (renamed ``neuron``), the tensor type and its
buffers (real or pending), buffer accounting against the simulated HBM, the
device's random generators, and the ``torch.neuron`` module API. Imports
``torchneuron.hardware`` only; what running an op means is installed from above
by ``torchneuron.dispatch`` (``set_op_handler``).
"""

import torch

from torchneuron.device import module
from torchneuron.device import random as _random
from torchneuron.device._registration import register
from torchneuron.device.accelerator import install_accelerator_bridge
from torchneuron.device.conversion import install_module_conversion
from torchneuron.device.parallel import install_data_parallel_refusal
from torchneuron.device.serialization import register_serialization
from torchneuron.device.tensor import NeuronTensor, neuron_device, set_op_handler


def _rebuild_neuron_tensor(
    buffer: torch.Tensor, index: int, requires_grad: bool
) -> torch.Tensor:
    """Unpickle a checkpoint written by torchneuron <= 0.1 (values saved as CPU data).

    New checkpoints tag their storages ``neuron:N`` instead (``serialization``), so
    a process without torchneuron loads them with ``map_location="cpu"``.
    """
    return buffer.to(neuron_device(index)).requires_grad_(requires_grad)


def _tolist(self: NeuronTensor) -> object:
    """``Tensor.tolist`` refuses tensor subclasses; read the values back through ``.cpu()``
    (an op, so the device sees the read), then convert as PyTorch does."""
    return self.detach().cpu().tolist()


def _numpy(self: NeuronTensor, *, force: bool = False) -> object:
    """As on CUDA: the values are in device memory, so ``.numpy()`` refuses (say what to
    do) unless ``force=True``, which copies them to the host first."""
    if not force:
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. "
            "Use Tensor.cpu() to copy the tensor to host memory first."
        )
    return self.detach().cpu().numpy()


register_serialization()
install_module_conversion()
_random.install_generator()
install_accelerator_bridge()
install_data_parallel_refusal()
NeuronTensor.tolist = _tolist  # type: ignore[method-assign]
NeuronTensor.numpy = _numpy  # type: ignore[method-assign, assignment]
torch.serialization.add_safe_globals([_rebuild_neuron_tensor])

__all__ = ["NeuronTensor", "neuron_device", "set_op_handler", "register", "module"]
