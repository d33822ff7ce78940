"""StableHLO: the IR the simulated Neuron compiler reads, and its parser.

Owns: the StableHLO program as plain data (``ir``), ``parse_module`` (text -> Module,
through torch-mlir's MLIR bindings, imported lazily) and MLIR attributes as plain values
(``_attrs``). Also exports the dense-constant helpers (``dense_to_tensor``,
``tensor_to_dense``, ``splat_dense``, ``torch_dtype``) that passes use to read and write
constants. Running a module is the interpreter's job (``compiler/interpreter/``).
Imports only torch, numpy and the standard library (torch_mlir lazily inside parse).
"""

from ._dtypes import dense_to_tensor, splat_dense, tensor_to_dense, torch_dtype
from .ir import Function, Module, Operation, TensorType
from .parse import StableHLOParseError, parse_module

__all__ = [
    "TensorType",
    "Operation",
    "Function",
    "Module",
    "parse_module",
    "StableHLOParseError",
    "dense_to_tensor",
    "tensor_to_dense",
    "splat_dense",
    "torch_dtype",
]
