"""StableHLO: the IR the simulated Neuron compiler reads, its parser and CPU interpreter.

Owns: the StableHLO program as plain data (``ir``), ``parse_module`` (text -> Module,
through torch-mlir's MLIR bindings, imported lazily), and ``interpret`` / ``prepare`` (runs every
StableHLO op with torch CPU ops, so a wrong lowering gives wrong numbers).
Also exports the dense-constant helpers (``dense_to_tensor``, ``tensor_to_dense``,
``splat_dense``, ``torch_dtype``) that passes use to read and write constants.
Imports only torch, numpy and the standard library (torch_mlir lazily inside parse).
"""

from ._dtypes import dense_to_tensor, splat_dense, tensor_to_dense, torch_dtype
from .interpret import (
    OPS,
    Prepared,
    StableHLOExecutionError,
    UnsupportedStableHLOOp,
    interpret,
    prepare,
)
from .ir import Function, Module, Operation, TensorType
from .parse import StableHLOParseError, parse_module

__all__ = [
    "TensorType",
    "Operation",
    "Function",
    "Module",
    "parse_module",
    "interpret",
    "prepare",
    "Prepared",
    "OPS",
    "StableHLOParseError",
    "UnsupportedStableHLOOp",
    "StableHLOExecutionError",
    "dense_to_tensor",
    "tensor_to_dense",
    "splat_dense",
    "torch_dtype",
]
