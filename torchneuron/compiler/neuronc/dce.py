"""Dead-code elimination: drop side-effect-free ops none of whose results are used.

Why first: every later pass (folding, fusion, costing) would otherwise pay for values
the program never returns, and the eager baseline would count kernels nobody needs.
"""

from __future__ import annotations

from torchneuron.hardware import HardwareProfile

from ._ops import all_operands, is_return, is_side_effecting
from .program import Program


def run(program: Program, profile: HardwareProfile) -> Program:
    """Walk the body backwards keeping ops that feed a kept op, the return, or a side effect."""
    body = program.function.body
    live: set[str] = set()
    keep = [False] * len(body)
    for i in range(len(body) - 1, -1, -1):
        op = body[i]
        if is_return(op) or is_side_effecting(op) or any(r in live for r in op.results):
            keep[i] = True
            live.update(all_operands(op))
    kept = [op for op, k in zip(body, keep, strict=True) if k]
    return program.with_body(kept, dce_removed=len(body) - len(kept))
