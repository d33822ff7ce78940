"""The simulated Neuron compiler: StableHLO module -> kernels, engines, tiles, schedule, cost.

Owns: the program representation (``program``), one module per pass run in the order
of ``passes.PASSES`` (dce, constant_fold, fuse, assign_engines, tile, allocate,
schedule), and the printable report (``report``). Imports ``torchneuron.hardware``
(profiles, ``KernelWork``, ``kernel_cost``: the same cost rules as eager ops) and
``torchneuron.compiler.stablehlo`` (IR, interpreter for constant folding) only.
"""

from .passes import PASSES, compile_module
from .program import Kernel, Program, ProgramCost
from .report import format_program

__all__ = ["PASSES", "Kernel", "Program", "ProgramCost", "compile_module", "format_program"]
