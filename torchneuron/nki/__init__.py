"""Custom kernels: the NKI programming model on the simulated NeuronCore.

Owns: the NKI language (``language``, ``isa``) following the public NKI 0.7 API as a
specification, the interpreter that runs a kernel as plain Python computing its values
on CPU tensors while checking the hardware's rules (``_ops``, ``_context``), the
schedule of a kernel's instructions on the engines (``schedule``), running kernels
(``jit``, ``simulate``), PyTorch custom ops backed by kernels (``op.nki_op``), how such
an op runs as a custom call inside a compiled program (``custom_call``), and a library
of kernels written in the dialect (``lib``).

May import: ``torchneuron.hardware`` (profiles, cost model, cores), ``torchneuron.device``
and ``torchneuron.dispatch`` (to unwrap and wrap neuron tensors), and the compiler's
registry of custom-call targets (``compiler.stablehlo.custom_targets``: an ``nki_op``
registers how its kernels run inside an executable, ``custom_call``). The compiler,
dynamo and adaptive eager do not import it: they find its ops through that registry.

Usage::

    from torchneuron import nki
    import torchneuron.nki.language as nl

    @nki.jit
    def add_kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ...
"""

from . import isa, language, lib
from .errors import NKIError
from .kernel import Kernel, jit, simulate, simulate_kernel
from .op import nki_op
from .schedule import KernelSchedule

__all__ = ["Kernel", "KernelSchedule", "NKIError", "isa", "jit", "language", "lib", "nki_op",
           "simulate", "simulate_kernel"]
