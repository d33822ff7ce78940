"""What every collapse plug-in builds on: the op that stands for a run, and the block's graph.

``Collapsed`` is the op a run of StableHLO ops becomes (``impl`` computes the run's
results at once; ``run_ops`` keeps the run, for the exact slow path ``_fallback`` and for
the interpreter's bookkeeping); ``_Graph`` answers who produces and who reads each value
of a block; ``_make`` / ``_make_multi`` build a ``Collapsed`` op from a recognised run.
The plug-ins (one module per pattern) import this module; ``plugins`` lists them in the
order they are tried.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from torchneuron.compiler.interpreter._registry import (
    CONSTANT_OPS,
    NEVER_HOISTED,
    OPS,
    OpFn,
    Runner,
)
from torchneuron.compiler.interpreter._specialize import specialize
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["Collapsed", "Body"]


Body = list[tuple[Operation, tuple[str, ...]]]


@dataclass
class Collapsed(Operation):
    """An op standing for a run of ops; ``impl`` computes the run's results at once."""

    impl: OpFn | None = None
    run_ops: Body = field(default_factory=list)


def _fallback(run_ops: Body, outer: tuple[str, ...]) -> OpFn:
    """Run the original ops of a fused run in order (the exact, slow path)."""
    steps = [(op, operands, specialize(op, OPS[op.name])) for op, operands in run_ops]

    def original(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        env = dict(zip(outer, args, strict=True))
        for inner, operands, fn in steps:
            env.update(zip(inner.results, fn(inner, [env[o] for o in operands], run),
                           strict=True))  # fmt: skip
        return [env[r] for r in op.results]

    return original


class _Graph:
    """Who produces and how often each value is read, in one block."""

    def __init__(self, body: Body, returns: tuple[str, ...] | None, pinned: set[str]) -> None:
        self.producer: dict[str, tuple[int, Operation, tuple[str, ...]]] = {}
        self.reads: Counter[str] = Counter(returns or ())
        self._body = body
        self._constant: dict[str, bool] = {}
        self._readers: dict[str, list[int]] | None = None
        for name in pinned:
            self.reads[name] += 1_000_000  # read from a nested region: never fused away
        for i, (op, operands) in enumerate(body):
            for r in op.results:
                self.producer[r] = (i, op, operands)
            self.reads.update(operands)

    def op(self, name: str, kind: str) -> tuple[int, Operation, tuple[str, ...]] | None:
        """The producer of ``name`` if it is a ``kind`` op."""
        hit = self.producer.get(name)
        return None if hit is None or hit[1].name != kind else hit

    def constant(self, name: str) -> bool:
        """Whether ``name`` is the same tensor on every run: made in this block by ops
        that read only such values (as the interpreter's kept constants; block arguments
        and runtime inputs never are, as their values can change between runs)."""
        hit = self._constant.get(name)
        if hit is None:
            self._constant[name] = False  # a cycle (none in SSA) is not constant
            prod = self.producer.get(name)
            hit = prod is not None and not prod[1].regions and (
                (prod[1].name in CONSTANT_OPS and not prod[2])
                or (bool(prod[2]) and prod[1].name not in NEVER_HOISTED
                    and all(self.constant(o) for o in prod[2]))
            )  # fmt: skip
            self._constant[name] = hit
        return hit

    def readers(self, name: str) -> list[int]:
        """The body indices of the ops reading ``name``, in order (each once)."""
        if self._readers is None:
            self._readers = {}
            for i, (_, operands) in enumerate(self._body):
                for o in dict.fromkeys(operands):
                    self._readers.setdefault(o, []).append(i)
        return self._readers.get(name, [])

    def closed(self, body: Body, ids: list[int], last: int, also: tuple[int, ...] = ()) -> bool:
        """Whether only ops of the run read the results of its ops other than ``last``
        (and those in ``also``)."""
        inside: Counter[str] = Counter()
        for i in ids:
            inside.update(body[i][1])
        return all(
            self.reads[r] == inside[r]
            for i in ids if i != last and i not in also for r in body[i][0].results
        )  # fmt: skip


def _type_of(body: Body, g: _Graph, name: str) -> Any:
    """The declared type of value ``name`` (None for a block argument: unknown here)."""
    hit = g.producer.get(name)
    if hit is None:
        for op, operands in body:
            for o, t in zip(operands, op.operand_types, strict=False):
                if o == name:
                    return t
        return None
    return hit[1].result_types[hit[1].results.index(name)]


def _make(last: Operation, outer: tuple[str, ...], run_ops: Body, impl: OpFn,
          kind: str) -> Collapsed:
    types = {}
    for op, operands in run_ops:
        types.update(zip(operands, op.operand_types, strict=False))
    return Collapsed(
        name=f"torchneuron.collapsed.{kind}",
        results=list(last.results),
        operands=list(outer),
        operand_types=[types[o] for o in outer],
        result_types=list(last.result_types),
        attributes={"ops": [op.name for op, _ in run_ops]},
        impl=impl,
        run_ops=run_ops,
    )


def _make_multi(results: tuple[str, ...], types: tuple[Any, ...], outer: tuple[str, ...],
                run_ops: Body, impl: OpFn, kind: str) -> Collapsed:
    """A fused op whose results are values of several of the run's ops."""
    last = Operation(name="", results=list(results), operands=[], operand_types=[],
                     result_types=list(types))
    return _make(last, outer, run_ops, impl, kind)
