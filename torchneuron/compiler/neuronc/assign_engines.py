"""Engine assignment: which NeuronCore engine executes each op of each kernel.

Why a pass of its own: the engine decides which cost rule applies (``_work``) and
which queue the scheduler occupies. Rules, in order:

- dot_general / convolution -> ``tensor`` (the 128x128 systolic array);
- transcendental activations (exp, log, logistic, tanh, rsqrt, erf, ...) -> ``scalar``
  (ScalarE's activation tables);
- gather / scatter / sort / iota / dynamic_slice / rng -> ``gpsimd``;
- concatenate / pad / slice / reverse, and transposes of tensors larger than one
  128x128 tile -> ``dma`` (descriptor-driven copies);
- reshape / bitcast_convert -> ``none`` (a view: no instruction);
- a custom call running eager's own kernel for an aten op (``decomp/eager_kernels``):
  ``scalar`` if it evaluates a transcendental, else ``vector``;
- everything else (elementwise arithmetic, compare, select, convert, broadcast,
  reductions, small transposes, unknown ops) -> ``vector``.
"""

from __future__ import annotations

import dataclasses

from torchneuron.compiler.stablehlo import Operation
from torchneuron.hardware import HardwareProfile

from ._ops import CONTRACTION, DATA_MOVE, FREE, GPSIMD, TRANSCENDENTAL, eager_cost, numel, short
from .program import Program

ENGINE_NAMES = ("tensor", "vector", "scalar", "gpsimd", "dma", "none")
SMALL_TRANSPOSE_ELEMS = 128 * 128


def engine_for(name: str, out_elems: int) -> str:
    """Engine of one op given its short name and result element count."""
    if name in CONTRACTION:
        return "tensor"
    if name in TRANSCENDENTAL:
        return "scalar"
    if name in GPSIMD:
        return "gpsimd"
    if name in DATA_MOVE or (name == "transpose" and out_elems > SMALL_TRANSPOSE_ELEMS):
        return "dma"
    if name in FREE:
        return "none"
    return "vector"


def engine_of(op: Operation) -> str:
    """Engine of one op of a program (a call of eager's kernel for an aten op: the
    activation engine if it evaluates a transcendental, else the vector engine)."""
    costed = eager_cost(op)
    if costed is not None:  # (a mark with no work: no instruction, as a reshape)
        return "scalar" if costed["scalar"] else "vector" if costed["vector"] else "none"
    return engine_for(short(op.name), numel(op.result_types[0]) if op.result_types else 0)


def run(program: Program, profile: HardwareProfile) -> Program:
    """Fill ``Kernel.engines`` (parallel to ``op_indices``) for every kernel."""
    body = program.function.body
    kernels = []
    for k in program.kernels:
        engines = []
        for i in k.op_indices:
            engines.append(engine_of(body[i]))
        kernels.append(dataclasses.replace(k, engines=engines))
    return dataclasses.replace(program, kernels=kernels)
