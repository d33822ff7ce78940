"""The StableHLO interpreter: runs a ``Module`` with torch CPU ops, the simulator's numbers.

Owns: ``interpret`` / ``load`` (a module made ready to run many times), the op
implementations (``_ops_*``, filed in ``_registry``), and the load-time accelerations
that make a loaded module run faster without changing a bit: ``_simplify``,
``_absorb``, ``_specialize*``, ``_codegen`` and the run collapses in ``collapse/``.
Imports ``compiler.stablehlo`` (the IR), torch, numpy and the standard library.
"""

from torchneuron.compiler.interpreter.interpret import (
    OPS,
    Loaded,
    StableHLOExecutionError,
    UnsupportedStableHLOOp,
    interpret,
    load,
)

__all__ = [
    "interpret",
    "load",
    "Loaded",
    "OPS",
    "UnsupportedStableHLOOp",
    "StableHLOExecutionError",
]
