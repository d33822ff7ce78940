"""Load-time fusion of pointwise arithmetic: a tree of single-use elementwise ops, one step.

Why: an optimizer's update lowers to many small elementwise ops (AdamW: ~14 per
parameter, eager runs 8 aten ops), each its own interpreter step with a fresh result
tensor; on tiny parameters the steps' Python costs more than the arithmetic. Here a tree
of ``add``/``subtract``/``multiply``/``divide``/``negate``/``abs``/``sqrt`` ops whose
inner results are read once, by their parent, runs as one ``Fused`` step: the leaves'
ops allocate, every op above one writes into its child's result in place (the child is
the step's own tensor, read by nobody else), and ``add(a, divide(multiply(t, v), d))``
with a scalar ``v`` is one ``torch.addcdiv`` (AdamW's and Adam's parameter update).
Numpy-like broadcasts read only by the tree are taken in (torch broadcasts the same
elements, as ``_absorb`` relies on).

Same bits: each op is the torch call the interpreter's own step makes, on the same
operands in the same order (``torch.sub(x, r, out=r)`` for ``x - r``, never ``r.sub_``
flipped), in the same dtype; these ops are correctly rounded, so a result does not
depend on where it is written. ``torch.addcdiv`` computes ``self + value * t1 / t2``
in that order and rounding in float32 and float64 (its kernel's scalar tail and vector
body both measured against the three ops, NaN, infinities, signed zeros and subnormals
included, in tests/compiler/test_fuse_pointwise.py); it is not used in float16 or
bfloat16, where it rounds once instead of three times. With a NaN ``value`` the kernel's
``value * t1`` might keep ``value``'s NaN where the program's ``t1 * value`` keeps
``t1``'s, so then the three ops run. Not fused: ``addcmul`` (its kernel is FMA-contracted
on AVX2/AVX-512: measured to differ in float32 and float64) and ``lerp`` (the same);
their decomposed ops are fused as a tree like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ._absorb import _numpy_like
from ._registry import Runner
from .ir import Operation, TensorType

__all__ = ["pointwise_tree"]

Body = list[tuple[Operation, tuple[str, ...]]]

# op -> (the torch call that makes a fresh result, the in-place method on its first operand)
_BINARY: dict[str, tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = {
    "stablehlo.add": (torch.add, torch.Tensor.add_),
    "stablehlo.subtract": (torch.sub, torch.Tensor.sub_),
    "stablehlo.multiply": (torch.mul, torch.Tensor.mul_),
    "stablehlo.divide": (torch.div, torch.Tensor.div_),
}
_UNARY: dict[str, tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]] = {
    "stablehlo.negate": (torch.neg, torch.Tensor.neg_),
    "stablehlo.abs": (torch.abs, torch.Tensor.abs_),
    "stablehlo.sqrt": (torch.sqrt, torch.Tensor.sqrt_),
}
_DTYPES = ("f16", "bf16", "f32", "f64")
_ADDCDIV_DTYPES = ("f32", "f64")  # where torch.addcdiv rounds like its three ops


def _eligible(op: Operation) -> bool:
    """A real-float elementwise op of ``_BINARY``/``_UNARY`` whose operands have its
    result's static type."""
    arity = 2 if op.name in _BINARY else 1 if op.name in _UNARY else 0
    if not arity or len(op.operands) != arity or len(op.results) != 1 or op.regions:
        return False
    out = op.result_types[0]
    return (
        out.dtype in _DTYPES and all(s >= 0 for s in out.shape)
        and all(t == out for t in op.operand_types)
    )  # fmt: skip


def _child(g: Any, name: str, out: TensorType) -> int | None:
    """The index of the op making ``name`` if it joins its reader's tree: eligible, of
    the tree's type, read once (by that reader; not returned, not read from a region)."""
    hit = g.producer.get(name)
    if hit is None or g.reads[name] != 1 or not _eligible(hit[1]):
        return None
    return hit[0] if hit[1].result_types[0] == out else None


def _is_root(g: Any, body: Body, at: int) -> bool:
    """Whether ``body[at]``'s tree ends there (its result does not join a parent's)."""
    op = body[at][0]
    name = op.results[0]
    readers = g.readers(name)
    if g.reads[name] != 1 or len(readers) != 1:
        return True
    parent = body[readers[0]][0]
    return not (_eligible(parent) and parent.result_types[0] == op.result_types[0])


@dataclass
class _Leaf:
    slot: int  # index of the outer value among the fused op's operands
    absorbed: bool  # read past a broadcast: possibly smaller than the tree's shape
    scalar: bool = False  # ... from a 0-d value


@dataclass
class _Node:
    op: Operation
    kids: list[_Leaf | _Node]


def pointwise_tree(g: Any, body: Body, at: int) -> tuple[Any, list[int]] | None:
    """The tree of single-use pointwise ops ending at ``body[at]`` as one fused op."""
    from ._fuse import _make

    op = body[at][0]
    if not _eligible(op) or not _is_root(g, body, at):
        return None
    out = op.result_types[0]
    ids: list[int] = []
    outer: list[str] = []

    def leaf(name: str, absorb: bool) -> _Leaf:
        scalar = False
        if absorb:
            hit = g.producer.get(name)
            if (
                hit is not None and hit[1].name == "stablehlo.broadcast_in_dim"
                and g.reads[name] == 1 and _numpy_like(hit[1])
            ):  # fmt: skip
                ids.append(hit[0])
                scalar = not hit[1].operand_types[0].shape
                name = hit[2][0]
            else:
                absorb = False
        if name not in outer:
            outer.append(name)
        return _Leaf(outer.index(name), absorb, scalar)

    def build(i: int) -> _Node:
        node_op, operands = body[i]
        ids.append(i)
        kids: list[_Leaf | _Node] = []
        for k, name in enumerate(operands):
            sub = _child(g, name, out)
            if sub is not None:
                kids.append(build(sub))
                continue
            # a broadcast may be read past when the other operand has the full shape
            # (the result must have it): never both operands, never a unary op's
            absorb = len(operands) == 2 and not (k == 1 and isinstance(kids[0], _Leaf)
                                                 and kids[0].absorbed)  # fmt: skip
            kids.append(leaf(name, absorb))
        return _Node(node_op, kids)

    root = build(at)
    if sum(1 for i in ids if _eligible(body[i][0])) < 2:
        return None  # one op: nothing to fuse (``_absorb`` takes its broadcasts)
    ids.sort()
    if not g.closed(body, ids, at):
        return None
    run_ops = [body[i] for i in ids]
    program, n_regs, result = _compile(root, len(outer), out.dtype)
    pad = [None] * (n_regs - len(outer))

    def pointwise(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        regs = [*args, *pad]
        for step in program:
            step(regs)
        return [regs[result]]

    fused = _make(op, tuple(outer), run_ops, pointwise, "pointwise")
    return fused, ids


Step = Callable[[list[Any]], None]


def _compile(root: _Node, n_outer: int, dtype: str) -> tuple[list[Step], int, int]:
    """The tree as a list of register steps (post-order), the register count and the
    register holding the root's result."""
    program: list[Step] = []
    n = [n_outer]

    def new() -> int:
        n[0] += 1
        return n[0] - 1

    def emit(ref: _Leaf | _Node) -> tuple[int, bool]:
        """(register of ``ref``'s value, whether the tree owns it: may be written)"""
        if isinstance(ref, _Leaf):
            return ref.slot, False
        hit = _addcdiv_parts(ref, dtype)
        if hit is not None:
            return _emit_addcdiv(hit, emit, new, program), True
        regs = [emit(k) for k in ref.kids]
        fresh, inplace = (_BINARY if len(regs) == 2 else _UNARY)[ref.op.name]
        owned = [i for i, (_, own) in enumerate(regs) if own]
        r = [reg for reg, _ in regs]
        if not owned:  # both operands outer values: a fresh result, as the op's own step
            o = new()
            if len(r) == 2:
                a, b = r
                program.append(lambda regs: regs.__setitem__(o, fresh(regs[a], regs[b])))
            else:
                (a,) = r
                program.append(lambda regs: regs.__setitem__(o, fresh(regs[a])))
            return o, True
        if len(r) == 1:
            (a,) = r
            program.append(lambda regs: inplace(regs[a]))
            return a, True
        a, b = r
        if owned[0] == 0:  # the left operand is ours: ``a.op_(b)`` is ``a op b``
            program.append(lambda regs: inplace(regs[a], regs[b]))
            return a, True
        program.append(lambda regs: fresh(regs[a], regs[b], out=regs[b]))  # ``a op b``
        return b, True

    reg, _ = emit(root)
    return program, n[0], reg


@dataclass
class _AddcdivParts:
    base: _Leaf | _Node  # ``a`` of ``a + (t * v) / d``
    t: _Leaf | _Node
    v: _Leaf
    d: _Leaf | _Node
    v_first: bool  # the program's multiply reads ``v * t`` (else ``t * v``)


def _full(ref: _Leaf | _Node) -> bool:
    return not (isinstance(ref, _Leaf) and ref.absorbed)


def _addcdiv_parts(node: _Node, dtype: str) -> _AddcdivParts | None:
    """``add(a, divide(multiply(t, v), d))`` with ``v`` a broadcast 0-d value and
    ``a``, ``t``, ``d`` of the full shape (``a + q``, not ``q + a``: the kernel's
    order, which decides which NaN a sum of two NaN keeps)."""
    if dtype not in _ADDCDIV_DTYPES or node.op.name != "stablehlo.add":
        return None
    base, q = node.kids
    if not (isinstance(q, _Node) and q.op.name == "stablehlo.divide"):
        return None
    m, d = q.kids
    if not (isinstance(m, _Node) and m.op.name == "stablehlo.multiply"):
        return None
    x, y = m.kids
    for v, t, v_first in ((y, x, False), (x, y, True)):
        if isinstance(v, _Leaf) and v.scalar and _full(t) and _full(base) and _full(d):
            return _AddcdivParts(base, t, v, d, v_first)
    return None


def _emit_addcdiv(parts: _AddcdivParts, emit: Callable[[Any], tuple[int, bool]],
                  new: Callable[[], int], program: list[Step]) -> int:  # fmt: skip
    """Steps for ``base + (t * v) / d`` (module docstring); the result's register."""
    a, a_own = emit(parts.base)
    t, _ = emit(parts.t)
    d, _ = emit(parts.d)
    v = parts.v.slot
    v_first = parts.v_first
    o = a if a_own else new()

    def addcdiv(regs: list[Any]) -> None:
        value = regs[v].item()
        if value != value:  # NaN: the program's three ops, in its operand order
            q = torch.mul(regs[v], regs[t]) if v_first else torch.mul(regs[t], regs[v])
            q.div_(regs[d])
            if a_own:
                regs[a].add_(q)
            else:
                regs[o] = torch.add(regs[a], q)
        elif a_own:
            regs[a].addcdiv_(regs[t], regs[d], value=value)
        else:
            regs[o] = torch.addcdiv(regs[a], regs[t], regs[d], value=value)

    program.append(addcdiv)
    return o
