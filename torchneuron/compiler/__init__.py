"""The neuron lowering path: FX -> prepare -> Torch-MLIR -> StableHLO -> neuron compiler.

Owns: capture/prepare (functionalize, decompose, legalize random ops), the
Torch-MLIR import in a worker process, the StableHLO IR and its CPU interpreter
(``stablehlo/``), the simulated Neuron compiler's passes (``neuronc/``), the
executable format, compile stats and dumps. Imports ``torchneuron.hardware``
(profiles and cost rules) and nothing above it.
"""

from torchneuron.compiler import options as _options  # noqa: F401  (declares its settings)
from torchneuron.compiler.decompositions import decomposition_table
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
