"""A prepared block's hot steps as one generated straight-line Python function.

Why: the interpreter's loop (``_Interpreter._run_steps``) pays ~1.5 us of bookkeeping per
step around each op call: fetch operands from a dict env, look up the step's attributes,
check the result, store it, drop dead values. Measured on the transformer LM's training
step that is ~1.35 ms of 4.2 ms, for 859 steps. Once a block has run completely its hot
steps never change, so (like torch.fx's ``GraphModule``) they can be written out once as
Python source in which each value is a local variable, each operand a local read, each
drop a ``del``: the per-step cost is the op call and the inline result check.

What the generated function does is exactly what the loop does, step for step: the same
callables on the same argument lists; the same checks of each result (the loop's inline
dtype/shape compare, then its ``check`` to explain or accept; ``check_shapes`` honored);
values freed after their last reader at the same points (``step.drop``: memory reuse);
values that a nested region reads by name (``pinned``) also written to the env dict the
region sees (``_Interpreter.scope``), and removed from it where the loop removes them;
a failure in an op wrapped by the caller in ``StableHLOExecutionError`` naming that op
(``Generated.failed_op``: the failing line of the generated code says which step).
A block it cannot express (a name read before it is made, or made twice) keeps the loop.

Security: no text of the program ever enters the source. Generated names are ours
(``v3``, ``f12``); the callables, ops, dtypes, shapes, constant tensors and value names
(as env keys) are bound in the function's globals under indexed names. ``Generated.source``
is what was compiled; ``Generated.listing()`` adds each step's op, for reading only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from .ir import Operation

__all__ = ["Generated", "generate"]


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


def generate(
    steps: Sequence[StepLike],
    produced: set[str],
    consts: Mapping[str, Any],
    pinned: set[str],
    returns: tuple[str, ...],
    slots: tuple[int, ...] | None,
    width: int,
    check: Callable[..., None],
    check_results: Callable[..., None],
) -> Generated | None:
    """The straight-line function running ``steps`` (a block's hot steps), or None when
    the block cannot be written that way (then the loop runs it).

    ``produced``: every name the block's steps make (hoisted ones included);
    ``consts``: the hoisted values, kept from the first run; ``pinned``: names a nested
    region reads by name; ``returns``/``slots``/``width``: what the block hands back
    (``slots``: where each return goes among ``width`` outputs, None when all do);
    ``check``/``check_results``: the loop's own result checks, so both paths explain a
    wrong result in the same words.
    """
    ns: dict[str, Any] = {"T": torch.Tensor, "isinstance": isinstance, "len": len,
                          "check": check, "check_results": check_results}  # fmt: skip
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
    pinned_consts = {n: v for n, v in consts.items() if n in pinned}
    if pinned_consts:  # a region reads them from the env, as the loop's ``env.update``
        ns["PC"] = pinned_consts
        body.append("env.update(PC)")
    for i, step in enumerate(steps):
        args = [read(o) for o in step.operands]
        if any(a is None for a in args):
            return None
        ns[f"f{i}"], ns[f"o{i}"], ns[f"x{i}"] = step.fn, step.op, step.checks
        body.append(f"r = f{i}(o{i}, [{', '.join(args)}], run)")  # type: ignore[arg-type]
        lines[len(body) + 1] = i  # +1: the ``def`` line comes first
        names = []
        for r in step.results:
            if r in live or r in const_names:
                return None  # made twice
            names.append(live.setdefault(r, f"v{count}"))
            count += 1
        if step.single:
            v = names[0]
            ns[f"d{i}"], ns[f"s{i}"] = step.dtypes[0], step.shapes[0]
            ns[f"t{i}"] = step.checks[0][3]  # the declared type, for ``check``'s message
            body += [
                "if len(r) != 1:",
                f"    check_results(o{i}, r, x{i}, cs)",
                f"{v} = r[0]",
                f"if isinstance({v}, T) and ({v}.dtype != d{i} or (cs and {v}.shape != s{i})):",
                f"    check(o{i}, {v}, t{i}, cs)",
            ]
        else:
            body.append(f"check_results(o{i}, r, x{i}, cs)")
            if names:
                body.append(f"{', '.join(names)}, = r")
        for r in step.results:
            if r in pinned:
                body.append(f"env[{key(r)}] = {live[r]}")
        for name in step.drop:
            if name not in live:
                return None
            body.append(f"del {live.pop(name)}")
            if name in pinned:
                body.append(f"del env[{key(name)}]")
    outs = [read(r) for r in returns]
    if any(o is None for o in outs):
        return None
    if slots is not None:
        full = ["None"] * width
        for s, o in zip(slots, outs, strict=True):
            full[s] = o  # type: ignore[assignment]
        outs = full  # type: ignore[assignment]
    body.append(f"return [{', '.join(outs)}]")  # type: ignore[arg-type]
    source = "\n".join(["def block(env, run, cs):"] + [f"    {line}" for line in body] + [""])
    exec(compile(source, "<torchneuron generated block>", "exec"), ns)  # noqa: S102
    return Generated(ns["block"], source, lines, steps)
