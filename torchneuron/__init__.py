"""torchneuron: PyTorch's ``neuron`` device on a simulated AWS Trainium NeuronCore.

``import torchneuron`` registers the device (``torch.device("neuron")``,
``torch.neuron``) and the ``torch.compile`` backend named ``"neuron"``, and makes
``torchneuron.compiler`` (``stats()``, ``explain()``, ``compile_graph``) available
before anything has been compiled.
"""

from torchneuron import compiler
from torchneuron import distributed as _distributed
from torchneuron import dynamo as _dynamo
from torchneuron._version import __version__
from torchneuron.device import NeuronTensor, register
from torchneuron.dispatch import executed_ops, fallback_ops, fallback_reasons, install
from torchneuron.hardware import current_profile, set_hardware

register()
install()
_dynamo.register()
_distributed.register()  # the torch.distributed backend "neuron"

from torchneuron import adaptive_eager  # noqa: E402  (after the device is registered)
from torchneuron.hardware import settings as _settings  # noqa: E402

if _settings.get_value("adaptive_eager"):  # TORCHNEURON_ADAPTIVE_EAGER=1
    adaptive_eager.enable()

__all__ = [
    "NeuronTensor",
    "compiler",
    "__version__",
    "adaptive_eager",
    "current_profile",
    "executed_ops",
    "fallback_ops",
    "fallback_reasons",
    "set_hardware",
]
