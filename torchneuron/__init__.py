"""torchneuron: PyTorch's ``neuron`` device on a simulated AWS Trainium NeuronCore.

``import torchneuron`` registers the device (``torch.device("neuron")``,
``torch.neuron``) and the ``torch.compile`` backend named ``"neuron"``, and makes
``torchneuron.compiler`` (``stats()``, ``explain()``, ``compile_graph``) available
before anything has been compiled.

``torchneuron.reset()`` resets every layer's process state and ``torchneuron.stats()``
gathers every layer's counters, each in its own section: each layer registers both with
``torchneuron/hardware/state.py`` when it is imported (lower layers never import upper
ones), and everything is imported here.
"""

from typing import Any

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
from torchneuron import cache as _cache  # noqa: E402, F401  (declares its settings and state)
from torchneuron.hardware import settings as _settings  # noqa: E402
from torchneuron.hardware import state as _state  # noqa: E402

if _settings.get_value("adaptive_eager"):  # TORCHNEURON_ADAPTIVE_EAGER=1
    adaptive_eager.enable()


def reset() -> None:
    """Reset every layer's process state, top layer first, for tests and benchmarks.

    Adaptive eager forgets its regions and executables (and stops background compiles),
    the cache forgets its default store (the next compile builds it from the settings),
    the compiler's and dispatch's counters are cleared, and every simulated core is
    forgotten (fresh clocks, memory accounting and counters). Each layer's own reset does
    the work (``adaptive_eager.reset``, ``cache.reset_default_store``,
    ``compiler.reset_stats``, ``dispatch.reset_op_tracking``, ``hardware.reset``).
    Settings are configuration and are kept (``hardware.settings.reset()`` forgets them);
    whether adaptive eager is enabled is kept too."""
    _state.reset_all()


def stats() -> dict[str, Any]:
    """Every layer's counters, one section each: ``hardware`` (each core's
    ``NeuronCore.stats()`` by device), ``dispatch`` (executed and fallback ops),
    ``compiler`` (``compiler.stats()``), ``cache`` (the default store's counts, {} if none
    was built) and ``adaptive_eager`` (``adaptive_eager.stats()``)."""
    gathered = _state.gather()
    order = ("hardware", "dispatch", "compiler", "cache", "adaptive_eager")  # bottom first
    return {**{k: gathered[k] for k in order if k in gathered}, **gathered}


__all__ = [
    "NeuronTensor",
    "compiler",
    "__version__",
    "adaptive_eager",
    "current_profile",
    "executed_ops",
    "fallback_ops",
    "fallback_reasons",
    "reset",
    "set_hardware",
    "stats",
]
