"""The simulated NeuronCore: hardware profiles, cost model, device timeline, memory accounting.

``torchneuron.hardware`` is the bottom layer. It owns the facts about the (simulated)
Trainium hardware and the simulated clock: which figures a profile has (``profiles``),
the one table of tunables (``settings``; each package declares its own rows), how long
a kernel takes (``cost``, ``eager_work``; a whole LSTM layer: ``rnn_work``), how host and device time advance
(``timeline``; work issued under side streams: ``side_streams``), HBM accounting (``memory``) and the per-index core that ties them
together (``core``). ``state`` is the seam through which every layer
registers its reset and counters for ``torchneuron.reset()`` / ``torchneuron.stats()``.

It imports nothing from other torchneuron packages: only torch, numpy and the standard
library, so every other layer can build on it. Simulated time is integer nanoseconds, a
pure function of the op stream, the profile and the settings.
"""

from . import settings, state
from .core import NeuronCore, device_count, get_core, reset
from .cost import (
    ENGINES,
    KernelCost,
    KernelWork,
    eager_compile_latency_ns,
    kernel_cost,
    program_compile_latency_ns,
)
from .eager_work import aten_kernel_work, dtype_name, op_name
from .memory import MemoryTracker, format_size
from .profiles import ASSUMED_FIELDS, PROFILES, HardwareProfile, get_profile
from .settings import compile_latency_enabled, current_profile, set_hardware
from .timeline import Timeline

__all__ = [
    "ASSUMED_FIELDS",
    "ENGINES",
    "PROFILES",
    "HardwareProfile",
    "KernelCost",
    "KernelWork",
    "MemoryTracker",
    "NeuronCore",
    "Timeline",
    "aten_kernel_work",
    "compile_latency_enabled",
    "current_profile",
    "device_count",
    "dtype_name",
    "eager_compile_latency_ns",
    "format_size",
    "get_core",
    "get_profile",
    "kernel_cost",
    "op_name",
    "program_compile_latency_ns",
    "reset",
    "set_hardware",
    "settings",
    "state",
]
