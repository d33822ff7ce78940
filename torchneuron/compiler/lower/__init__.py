"""Lower: a prepared FX graph -> StableHLO text, through Torch-MLIR, in a warm worker.

Owns: the Torch-MLIR import (``importer``), its literal tracker (``literal_tracker``) and
the child process that runs it (``worker``). Imports ``compiler.errors``, torch and
torch_mlir (lazily); nothing from the other stages.
"""
