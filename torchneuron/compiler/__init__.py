"""The neuron lowering path: FX -> prepare -> Torch-MLIR -> StableHLO -> neuron compiler.

Its stages are folders, in the order data flows: ``prepare/`` (functionalize, decompose,
legalize random ops and index bounds), ``decomp/`` (the decomposition table ``prepare``
traces with: ordered layers, one owner per overload), ``lower/`` (the Torch-MLIR import,
in a worker process), ``stablehlo/`` (the IR), ``interpreter/`` (runs the IR with torch
CPU ops) and ``neuronc/`` (the simulated Neuron compiler's passes). At the top: the
entry point (``pipeline``), the executable format (``executable``, ``versions``), its
launch, cache keys and the cache seam (``store``), stats, dumps and verification.
Imports ``torchneuron.hardware`` (profiles and cost rules), ``torchneuron.device`` and
``torchneuron.dispatch`` (the fused RNN cells' kernels), and nothing above them.
"""

from torchneuron.compiler import options as _options  # noqa: F401  (declares its settings)
from torchneuron.compiler.decomp.table import decomposition_table
from torchneuron.compiler.errors import (
    CaptureError,
    CompileError,
    ExecuteError,
    LoweringError,
    NeuronCompileError,
    PrepareError,
    WorkerCrash,
)
from torchneuron.compiler.executable import (
    COMPILER_VERSION,
    FORMAT_VERSION,
    Executable,
    ExecutableFormatError,
)
from torchneuron.compiler.pipeline import compile_graph
from torchneuron.compiler.stats import explain, reset_stats, stats

__all__ = [
    "COMPILER_VERSION",
    "FORMAT_VERSION",
    "CaptureError",
    "CompileError",
    "ExecuteError",
    "Executable",
    "ExecutableFormatError",
    "LoweringError",
    "NeuronCompileError",
    "PrepareError",
    "WorkerCrash",
    "compile_graph",
    "decomposition_table",
    "explain",
    "reset_stats",
    "stats",
]
