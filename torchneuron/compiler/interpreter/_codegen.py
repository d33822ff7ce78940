"""A loaded block's hot steps as one generated straight-line Python function.

Why: around each op call the interpreter's loop (``_Interpreter._run_steps``) fetches
operands from a dict env, reads the step's attributes, checks the result, stores it and
drops dead values: ~0.5 us per step with the ops stubbed out (the transformer LM's
training step, 859 steps). A block's hot steps never change once it has run, so (like
torch.fx's ``GraphModule``) they can be written out once as Python source in which each
value is a local variable, each operand a local read, each drop a ``del``; what is left
per step is the op call and one inline test of its result (~0.3 us with stubs).

What the generated function does is exactly what the loop does, step for step: the same
callables on the same argument lists; the same test of each result, with the loop's slow
path (``single``/``check_results``: explain or accept; ``check_shapes`` honored);
values freed after their last reader at the same points (``step.drop``: memory reuse);
values that a nested region reads by name (``pinned``) also written to the env dict the
region sees (``_Interpreter.scope``), and removed from it where the loop removes them;
a failure in an op wrapped by the caller in ``StableHLOExecutionError`` naming that op
(``Generated.failed_op``: the failing line of the generated code says which step).
A block it cannot express (a name read before it is made, or made twice) keeps the loop.

Cost: compiling the source takes ~0.1 ms per step, as much as 100-300 runs of the loop
save, which is why the interpreter generates a block only once it has run a few times
(``Loaded.codegen_after``).

Security: no text of the program ever enters the source. Generated names are ours
(``v3``, ``f12``); the callables, ops, dtypes, shapes, constant tensors and value names
(as env keys) are bound in the function's globals under indexed names. ``Generated.source``
is what was compiled; ``Generated.listing()`` adds each step's op, for reading only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["Generated", "generate"]


class BlockLike(Protocol):
    """What the generator reads of an interpreter ``_Block``."""

    steps: Sequence[StepLike]
    hot: Sequence[StepLike]
    consts: Mapping[str, Any] | None
    pinned: set[str]
    returns: tuple[str, ...] | None
    slots: tuple[int, ...] | None
    width: int


class StepLike(Protocol):
    """What the generator reads of an interpreter ``_Step``."""

    op: Operation
    fn: Callable[..., list[Any]]
    operands: tuple[str, ...]
    results: tuple[str, ...]
    dtypes: tuple[Any, ...]
    shapes: tuple[Any, ...]
    checks: tuple[Any, ...]
    single: bool
    drop: tuple[str, ...]


class Generated:
    """One block's generated function: ``fn(env, run, check_shapes) -> returns``."""

    __slots__ = ("fn", "source", "_lines", "_steps")

    def __init__(self, fn: Callable[..., list[Any]], source: str,
                 lines: dict[int, int], steps: Sequence[StepLike]) -> None:  # fmt: skip
        self.fn = fn
        self.source = source
        self._lines = lines  # source line of each step's op call -> index in ``steps``
        self._steps = steps

    def failed_op(self, e: BaseException) -> Operation | None:
        """The op whose call raised ``e`` inside ``fn``; None when ``e`` came from the
        bookkeeping around the calls (a result check), which the loop does not wrap."""
        tb = e.__traceback__
        code = self.fn.__code__
        while tb is not None and tb.tb_frame.f_code is not code:
            tb = tb.tb_next
        i = None if tb is None else self._lines.get(tb.tb_lineno)
        return None if i is None else self._steps[i].op

    def listing(self) -> str:
        """The source with each call line followed by its op's results and name (for
        reading only: this text is never compiled)."""
        out = []
        for n, line in enumerate(self.source.splitlines(), start=1):
            i = self._lines.get(n)
            if i is not None:
                op = self._steps[i].op
                line = f"{line}  # {', '.join('%' + r for r in op.results)} = {op.name}"
            out.append(line)
        return "\n".join(out)


def _inline_reshape(step: StepLike) -> bool:
    """Whether ``step`` is a specialized ``reshape`` to a static shape that keeps its
    operand's declared dtype (``_specialize._reshape``): the generated code calls
    ``x.reshape(shape)`` itself, as that step does, and leaves out the test of its
    result, which is proven: ``reshape`` returns that shape or raises, and keeps the
    dtype of its operand, whose own dtype was tested where it was made (a step's result,
    an input, a constant)."""
    to = getattr(step.fn, "reshape_to", None)
    op = step.op
    return (
        to is not None and step.single and len(step.operands) == 1
        and len(op.operand_types) == 1 and step.shapes[0] == torch.Size(to)
        and op.operand_types[0].dtype == op.result_types[0].dtype
    )  # fmt: skip


def _after(step: StepLike, body: list[str], live: dict[str, str], key: Callable[[str], str],
           pinned: set[str]) -> None:
    """A step's results that a nested region reads by name, written to the env."""
    body += [f"env[{key(r)}] = {live[r]}" for r in step.results if r in pinned]


def generate(
    block: BlockLike,
    single: Callable[..., Any],
    check_results: Callable[..., None],
) -> Generated | None:
    """``block``'s hot steps as one straight-line function, or None when the block cannot
    be written that way (then the loop runs it). Call it after the block's first complete
    run: the function binds the constants kept then (``block.consts``).

    ``single(results, dtype, shape, step, check_shapes)``: the loop's check of a step with
    one result of static type, returning that result; ``check_results(op, results,
    step.checks, check_shapes)``: its check of any other step. Both are the loop's own, so
    both paths accept the same results and explain a wrong one in the same words.
    """
    consts = block.consts if block.consts is not None else {}
    produced = {r for s in block.steps for r in s.results}  # hoisted ones included
    ns: dict[str, Any] = {"T": torch.Tensor, "single": single, "check_results": check_results}
    keys: dict[str, str] = {}  # value name -> global holding it as a string (an env key)

    def key(name: str) -> str:
        if name not in keys:
            keys[name] = f"k{len(keys)}"
            ns[keys[name]] = name
        return keys[name]

    live: dict[str, str] = {}  # value name -> the local holding it now
    const_names: dict[str, str] = {}
    for j, (name, value) in enumerate(consts.items()):
        const_names[name] = f"c{j}"
        ns[f"c{j}"] = value
    count = 0

    def read(name: str) -> str | None:
        """The expression for operand ``name`` at this point (None: not expressible)."""
        nonlocal count
        if name in live:
            return live[name]
        if name in const_names:
            return const_names[name]
        if name in produced:  # made by a later step, or already dropped: the loop's
            return None  # KeyError; leave such a block to it
        local = live[name] = f"v{count}"  # from the enclosing env, read once, on first use
        count += 1
        return f"({local} := env[{key(name)}])"

    body: list[str] = []
    lines: dict[int, int] = {}
    pinned = block.pinned
    pinned_consts = {n: v for n, v in consts.items() if n in pinned}
    if pinned_consts:  # a region reads them from the env, as the loop's ``env.update``
        ns["PC"] = pinned_consts
        body.append("env.update(PC)")
    steps = block.hot
    for i, step in enumerate(steps):
        args = [read(o) for o in step.operands]
        if any(a is None for a in args):
            return None
        if _inline_reshape(step):  # the call itself: its result needs no test (below)
            if step.results[0] in live or step.results[0] in const_names:
                return None  # made twice
            v = live[step.results[0]] = f"v{count}"
            count += 1
            ns[f"R{i}"] = step.fn.reshape_to  # type: ignore[attr-defined]
            body.append(f"{v} = {args[0]}.reshape(R{i})")
            lines[len(body) + 1] = i
            _after(step, body, live, key, pinned)
            if any(name not in live for name in step.drop):
                return None
            if step.drop:
                body.append(f"del {', '.join(live.pop(name) for name in step.drop)}")
            body += [f"del env[{key(name)}]" for name in step.drop if name in pinned]
            continue
        ns[f"f{i}"], ns[f"o{i}"], ns[f"p{i}"] = step.fn, step.op, step
        body.append(f"r = f{i}(o{i}, [{', '.join(args)}], run)")  # type: ignore[arg-type]
        lines[len(body) + 1] = i  # +1: the ``def`` line comes first
        names = []
        for r in step.results:
            if r in live or r in const_names:
                return None  # made twice
            names.append(live.setdefault(r, f"v{count}"))
            count += 1
        if step.single:  # the loop's test inline (a call costs more than the test), one
            v = names[0]  # ``if`` (each costs compile time); ``single`` accepts or explains
            ns[f"d{i}"], ns[f"s{i}"] = step.dtypes[0], step.shapes[0]
            body += [
                f"if len(r) != 1 or not isinstance({v} := r[0], T) or {v}.dtype is not d{i}"
                f" or (cs and {v}.shape != s{i}):",
                f"    {v} = single(r, d{i}, s{i}, p{i}, cs)",
            ]
        else:
            ns[f"x{i}"] = step.checks
            body.append(f"check_results(o{i}, r, x{i}, cs)")
            if names:
                body.append(f"{', '.join(names)}, = r")
        body += [f"env[{key(r)}] = {live[r]}" for r in step.results if r in pinned]
        if any(name not in live for name in step.drop):
            return None
        if step.drop:
            body.append(f"del {', '.join(live.pop(name) for name in step.drop)}")
        body += [f"del env[{key(name)}]" for name in step.drop if name in pinned]
    outs = [read(r) for r in block.returns or ()]
    if block.returns is None or any(o is None for o in outs):
        return None
    if block.slots is not None:
        full = ["None"] * block.width
        for slot, o in zip(block.slots, outs, strict=True):
            full[slot] = o  # type: ignore[assignment]
        outs = full  # type: ignore[assignment]
    body.append(f"return [{', '.join(outs)}]")  # type: ignore[arg-type]
    source = "\n".join(["def block(env, run, cs):"] + [f"    {line}" for line in body] + [""])
    # compiled afresh, never shared between blocks: CPython specializes a code object's
    # global reads for one globals dict, and two dicts taking turns (measured: ~200 ns
    # per step) undo that
    exec(compile(source, "<torchneuron generated block>", "exec"), ns)  # noqa: S102
    return Generated(ns["block"], source, lines, steps)
