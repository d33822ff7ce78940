"""A program input kept in eager's layout for some readers, a contiguous copy for the rest.

Why: an input with gaps between its rows (a slice, a stepped view) reaches elementwise
ops in its own layout, as in eager, whose loops run such rows in their scalar tail
(libm's ``exp``, not SLEEF's: ``executable.traced_layouts``). Most other ops' torch calls
here assume a contiguous operand (the interpreter's index arithmetic), so an input read
by both kinds was handed to all of them contiguous, and the elementwise ops lost eager's
bits: ``logit(sigmoid(x))`` of ``x[::2, ::3]`` beside ``x[:, 3]`` or ``mv(x, x[0])`` was off
in 98 of 2310 float32 elements. ``with_contiguous_copies`` gives the program, for the
interpreter only, one ``torchneuron.contiguous`` op per such input at the start of its
entry function, and the other readers read that copy (the compiler's program and its
simulated times are unchanged). Imports the interpreter's registry and the IR.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from torchneuron.compiler.interpreter._registry import Runner, register
from torchneuron.compiler.stablehlo.ir import Module, Operation

__all__ = ["CONTIGUOUS", "with_contiguous_copies"]

CONTIGUOUS = "torchneuron.contiguous"


@register(CONTIGUOUS)
def contiguous(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return [args[0].contiguous()]


def _renamed(op: Operation, copies: dict[str, str],
             takes_any_layout: Callable[[Operation], bool]) -> Operation:
    """``op`` reading ``copies[name]`` for each input name it reads, unless it takes any
    layout (its regions likewise, op by op)."""
    operands = op.operands if takes_any_layout(op) else [copies.get(o, o) for o in op.operands]
    regions = [[_renamed(inner, copies, takes_any_layout) for inner in region]
               for region in op.regions]
    if operands == op.operands and all(
            new is old for r_new, r_old in zip(regions, op.regions, strict=True)
            for new, old in zip(r_new, r_old, strict=True)):
        return op
    return replace(op, operands=list(operands), regions=regions)


def with_contiguous_copies(module: Module, names: set[str],
                           takes_any_layout: Callable[[Operation], bool]) -> Module:
    """``module`` whose entry function copies each argument in ``names`` contiguous first,
    every reader of it but those ``takes_any_layout`` accepts reading the copy. The
    given module is not changed."""
    func = module.functions[module.entry]
    copies = {name: f"{name}.contiguous" for name, _ in func.args if name in names}
    if not copies:
        return module
    types = dict(func.args)
    head = [Operation(CONTIGUOUS, [copy], [name], [types[name]], [types[name]])
            for name, copy in copies.items()]
    body = head + [_renamed(op, copies, takes_any_layout) for op in func.body]
    functions = {**module.functions, module.entry: replace(func, body=body)}
    return replace(module, functions=functions)
