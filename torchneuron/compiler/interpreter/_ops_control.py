"""Control flow: while, case, if, func.call and stablehlo.composite.

Loop and branch bodies run through the same interpreter (``run.region``), so they
accept any op the dispatch table knows.
"""

from __future__ import annotations

from typing import Any

from torchneuron.compiler.interpreter._registry import Runner, register
from torchneuron.compiler.stablehlo.ir import Operation


def _truth(t: Any) -> bool:
    return bool(t.reshape(()).item())


@register("stablehlo.while")
def while_(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    state = list(args)
    while _truth(run.region(op, 0, state)[0]):
        state = run.region(op, 1, state)
    return state


@register("stablehlo.case")
def case(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    index = int(args[0].reshape(()).item())
    n = len(op.regions)
    if index < 0 or index >= n:
        index = n - 1  # StableHLO: out-of-range index runs the last branch
    return run.region(op, index, [])


@register("stablehlo.if")
def if_(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return run.region(op, 0 if _truth(args[0]) else 1, [])


def _callee(value: Any) -> str:
    text = value["text"] if isinstance(value, dict) else str(value)
    return text.lstrip("@").strip('"')


@register("func.call", "stablehlo.call")
def call(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return run.call(_callee(op.attributes["callee"]), list(args))


@register("stablehlo.composite")
def composite(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    """A composite is defined by its decomposition function; run that."""
    return run.call(_callee(op.attributes["decomposition"]), list(args))
