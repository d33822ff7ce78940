"""The StableHLO interpreter: runs a ``Module`` with torch CPU ops, the simulator's numbers.

Owns: ``interpret`` / ``prepare`` (a module made ready to run many times), the op
implementations (``_ops_*``, filed in ``_registry``), and the load-time accelerations
that make a prepared module run faster without changing a bit: ``_simplify``,
``_absorb``, ``_specialize*``, ``_codegen`` and the run collapses in ``collapse/``.
Imports ``compiler.stablehlo`` (the IR), torch, numpy and the standard library.
"""

from torchneuron.compiler.interpreter.interpret import (
    OPS,
    Prepared,
    StableHLOExecutionError,
    UnsupportedStableHLOOp,
    interpret,
    prepare,
)

__all__ = [
    "interpret",
    "prepare",
    "Prepared",
    "OPS",
    "UnsupportedStableHLOOp",
    "StableHLOExecutionError",
]
