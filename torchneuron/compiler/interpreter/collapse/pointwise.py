"""Load-time fusion of pointwise arithmetic: a tree of single-use elementwise ops, one step.

Why: an optimizer's update lowers to many small elementwise ops (AdamW: ~14 per
parameter, eager runs 8 aten ops), each its own interpreter step with a fresh result
tensor; on tiny parameters the steps' Python costs more than the arithmetic. Here a tree
of ``add``/``subtract``/``multiply``/``divide``/``negate``/``abs``/``sqrt`` ops whose
inner results are read once, by their parent, runs as one ``Collapsed`` step: the leaves'
ops allocate, every op above one writes into its child's result in place (the child is
the step's own tensor, read by nobody else), and ``add(a, divide(multiply(t, v), d))``
with a scalar ``v`` is one ``torch.addcdiv`` (AdamW's and Adam's parameter update).
Numpy-like broadcasts read only by the tree are taken in (torch broadcasts the same
elements, as ``_absorb`` relies on), and so are reshapes and transposes read only by the
tree (the same view calls, made in the tree's function instead of steps of their own).

Same bits: each op is the torch call the interpreter's own step makes, on the same
operands in the same order (``torch.sub(x, r, out=r)`` for ``x - r``, never ``r.sub_``
flipped), in the same dtype; these ops are correctly rounded, so a result does not
depend on where it is written. In float16 and bfloat16 every op writes a fresh result:
there the layout written into decides whether torch's vector or scalar loop runs, and
the two keep different NaNs of two. ``torch.addcdiv`` computes ``self + value * t1 / t2``
in that order and rounding in float32 and float64 (its kernel's scalar tail and vector
body both measured against the three ops, NaN, infinities, signed zeros and subnormals
included, in tests/compiler/interpreter/test_interpreter_collapse_pointwise.py); it is not used in float16 or
bfloat16, where it rounds once instead of three times. With a NaN ``value`` the kernel's
``value * t1`` might keep ``value``'s NaN where the program's ``t1 * value`` keeps
``t1``'s, so then the three ops run. Not used: ``torch.addcmul`` and ``torch.lerp``,
whose CPU kernels fuse the multiply and add (measured with AVX-512: ``addcmul`` differs
from ``a + (t1 * v) * t2`` on ~14% of random float32 and float64 elements, ``lerp``
from ``(e - s) * w + s`` on ~12-15%, vector body and scalar tail alike); their
programs' ops run as a tree like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from torchneuron.compiler.interpreter._absorb import _numpy_like
from torchneuron.compiler.interpreter._registry import ints
from torchneuron.compiler.interpreter.collapse.base import _make
from torchneuron.compiler.stablehlo.ir import Operation, TensorType

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
# where writing into an intermediate (whose layout may differ from a fresh result's) gives
# a fresh result's bits: in float16 and bfloat16 torch's vector and scalar loops keep
# different NaNs of two, and the layout decides which loop runs
_IN_PLACE_DTYPES = ("f32", "f64")


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
    views: str = ""  # the view calls (``.reshape(...)``, ``.permute(...)``) it is read through


def _view_call(op: Operation) -> str | None:
    """The call a single-operand ``reshape`` (to a static shape) or ``transpose`` makes
    (the interpreter's specialized steps: ``x.reshape(shape)``, ``x.permute(perm)``), as
    source; None for any other op."""
    if len(op.operands) != 1 or len(op.results) != 1 or op.regions:
        return None
    if op.name == "stablehlo.reshape" and all(s >= 0 for s in op.result_types[0].shape):
        return f".reshape({tuple(op.result_types[0].shape)!r})"
    if op.name == "stablehlo.transpose":
        return f".permute({ints(op, 'permutation')!r})"
    return None


@dataclass
class _Node:
    op: Operation
    kids: list[_Leaf | _Node]


def pointwise_tree(g: Any, body: Body, at: int) -> tuple[Any, list[int]] | None:
    """The tree of single-use pointwise ops ending at ``body[at]`` as one fused op."""
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
        views: list[str] = []  # the view calls from the outer value to the leaf, last first
        while not absorb:
            hit = g.producer.get(name)
            call = None if hit is None or g.reads[name] != 1 else _view_call(hit[1])
            if call is None:
                break
            ids.append(hit[0])
            views.append(call)
            name = hit[2][0]
        if name not in outer:
            outer.append(name)
        return _Leaf(outer.index(name), absorb, scalar, "".join(reversed(views)))

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
    pointwise = _compile(root, len(outer), out.dtype)
    fused = _make(op, tuple(outer), run_ops, pointwise, "pointwise")
    return fused, ids


# the torch calls a tree's code may make, by the names it uses for them
_NAMESPACE: dict[str, Any] = {
    "_" + fn.__name__: fn for fn, _ in (*_BINARY.values(), *_UNARY.values())
} | {"_addcdiv": torch.addcdiv}


def _compile(root: _Node, n_outer: int, dtype: str) -> Callable[..., list[Any]]:
    """The tree as one Python function of the fused op's operands (post-order, one line
    per torch call). Why source: a list of small closures run by a loop cost 2.2 µs on
    a 3-op tree whose torch calls take 3.9 µs; the generated function costs 0.3 µs."""
    lines: list[str] = []
    n = [0]
    in_place = dtype in _IN_PLACE_DTYPES

    def new() -> str:
        n[0] += 1
        return f"r{n[0] - 1}"

    def emit(ref: _Leaf | _Node) -> tuple[str, bool]:
        """(the variable holding ``ref``'s value, whether the tree owns it: may write it)"""
        if isinstance(ref, _Leaf):
            if not ref.views:
                return f"a{ref.slot}", False
            v = new()
            lines.append(f"{v} = a{ref.slot}{ref.views}")
            return v, False
        hit = _addcdiv_parts(ref, dtype)
        if hit is not None:
            return _emit_addcdiv(hit, emit, new, lines), True
        regs = [emit(k) for k in ref.kids]
        fresh, inplace = (_BINARY if len(regs) == 2 else _UNARY)[ref.op.name]
        f, m = "_" + fresh.__name__, inplace.__name__
        owned = [i for i, (_, own) in enumerate(regs) if own and in_place]
        r = [name for name, _ in regs]
        if not owned:  # only outer values: a fresh result, as the op's own step makes
            o = new()
            lines.append(f"{o} = {f}({', '.join(r)})")
            return o, True
        if len(r) == 1:
            lines.append(f"{r[0]}.{m}()")
            return r[0], True
        a, b = r
        if owned[0] == 0:  # the left operand is ours: ``a.op_(b)`` is ``a op b``
            lines.append(f"{a}.{m}({b})")
            return a, True
        lines.append(f"{f}({a}, {b}, out={b})")  # ``a op b`` into b, operands in order
        return b, True

    result, _ = emit(root)
    params = ", ".join(f"a{i}" for i in range(n_outer))
    body = "\n    ".join(lines)
    source = (f"def pointwise(op, args, run):\n    {params}, = args\n    {body}\n"
              f"    return [{result}]\n")  # fmt: skip
    scope = dict(_NAMESPACE)
    exec(compile(source, "<pointwise tree>", "exec"), scope)  # noqa: S102 (our own text)
    return scope["pointwise"]


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


def _emit_addcdiv(parts: _AddcdivParts, emit: Callable[[Any], tuple[str, bool]],
                  new: Callable[[], str], lines: list[str]) -> str:  # fmt: skip
    """Lines for ``base + (t * v) / d`` (module docstring); the result's variable."""
    a, a_own = emit(parts.base)
    t, _ = emit(parts.t)
    d, _ = emit(parts.d)
    v = f"a{parts.v.slot}"
    o = a if a_own else new()
    q = new()
    mul = f"_mul({v}, {t})" if parts.v_first else f"_mul({t}, {v})"
    lines.extend([
        f"value = {v}.item()",
        "if value != value:",  # NaN: the program's three ops, in its operand order
        f"    {q} = {mul}",
        f"    {q}.div_({d})",
        f"    {a}.add_({q})" if a_own else f"    {o} = _add({a}, {q})",
        "else:",
        f"    {a}.addcdiv_({t}, {d}, value=value)" if a_own
        else f"    {o} = _addcdiv({a}, {t}, {d}, value=value)",
    ])  # fmt: skip
    return o
