"""Load-time fusion of a NaN override: two selects whose predicate is false without a NaN.

Why: max-pooling's lowering makes a NaN win its window, as ATen does. After the pool
proper (values and indices, ``window``/``pool``), it marks the input's NaNs
(``compare NE x, x``), turns the marks into flat positions (a select between two
constant tables), takes each window's largest with the pool's own slices and reduce,
and where a window holds a NaN, selects that NaN (a clamp, a gather) and its position
instead of the pool's value and index::

    m = compare_NE(x, x); ...; p = compare_GE(convert(reduce_max(...m...)), 0)
    v = select(p, gather(x, ...), v0); i = select(p, nan_position, i0)

That is about twenty-five steps of the interpreter per pool on every training step,
more wall time than the pool itself, and for an input without a NaN (the usual case)
they give ``v0`` and ``i0`` unchanged. Here the run is one fused op: when ``x`` holds no
NaN, the mask is all false, and the predicate, a function of the mask and program
constants only, is whatever it is for an all-false mask; it is computed once (by the
run's own ops, with the constants the interpreter keeps) and when it is false
everywhere the two selects give their third operands, bit for bit, so those are the
results. With a NaN in ``x``, or a predicate that is not all false, the original ops run.

The form is checked, not assumed: two selects, the only readers of one predicate; the
predicate's whole cone made of pure ops from program constants and one mask
``compare NE x, x`` of a float ``x``; each select's third operand of its result type;
nothing outside the run reading the run's inner values; the first select's result read
only after the second. Nothing else of the pooling lowering is relied on.
"""

from __future__ import annotations

import heapq
from types import SimpleNamespace
from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import OpFn, Runner
from torchneuron.compiler.interpreter.collapse.base import _fallback, _make_multi
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["nan_override"]

# ops allowed in the predicate's cone: pure, deterministic, no regions but a reduce's
_PURE = frozenset(f"stablehlo.{n}" for n in (
    "pad", "slice", "concatenate", "reshape", "broadcast_in_dim", "transpose", "reduce",
    "convert", "compare", "select", "and", "or", "not", "maximum", "minimum", "clamp",
    "add", "subtract", "multiply",
))  # fmt: skip
_MAX_CONE = 64  # ops in the predicate's cone: a longer one is another form
_FLOATS = ("f16", "bf16", "f32", "f64")


def _is_mask(op: Operation, operands: tuple[str, ...]) -> bool:
    """``compare NE x, x`` of a float ``x``: true exactly at ``x``'s NaNs."""
    return (
        op.name == "stablehlo.compare" and len(operands) == 2 and operands[0] == operands[1]
        and op.attributes.get("comparison_direction") == "NE"
        and op.attributes.get("compare_type", "FLOAT") == "FLOAT"
        and op.operand_types[0].dtype in _FLOATS
    )  # fmt: skip


def _predicate_cone(g: Any, p: str) -> tuple[list[int], int, list[str]] | None:
    """The ops computing ``p`` from program constants and one NaN mask: (their body
    indices, the mask op's index, the constant names they read); None for another form."""
    cone: set[int] = set()
    consts: list[str] = []
    mask: int | None = None
    todo, seen = [p], {p}
    while todo:
        v = todo.pop()
        if g.constant(v):
            consts.append(v)
            continue
        prod = g.producer.get(v)
        if prod is None:  # a block argument: read at run time
            return None
        i, op, operands = prod
        if i in cone:
            continue
        if _is_mask(op, operands):
            if mask is not None and mask != i:
                return None
            mask = i
            cone.add(i)
            continue
        if op.name not in _PURE or (op.regions and op.name != "stablehlo.reduce"):
            return None
        cone.add(i)
        if len(cone) > _MAX_CONE:
            return None
        for o in operands:
            if o not in seen:
                seen.add(o)
                todo.append(o)
    if mask is None:
        return None
    return sorted(cone), mask, consts


def nan_override(g: Any, body: Any, at: int) -> tuple[Any, list[int]] | None:
    """The run ending at the second of two selects over one NaN predicate, as one op."""
    s2, ops2 = body[at]
    if s2.name != "stablehlo.select" or len(ops2) != 3:
        return None
    p = ops2[0]
    readers = g.readers(p)
    if len(readers) != 2 or g.reads[p] != 2 or readers[1] != at:
        return None
    i1 = readers[0]
    s1, ops1 = body[i1]
    if s1.name != "stablehlo.select" or len(ops1) != 3 or p in ops1[1:] or p in ops2[1:]:
        return None
    for sel in (s1, s2):
        t = sel.result_types[0]
        if sel.operand_types[2] != t or not all(s >= 0 for s in t.shape):
            return None
    found = _predicate_cone(g, p)
    if found is None:
        return None
    cone, mask_at, consts = found
    x = body[mask_at][1][0]
    keep = {ops1[2], ops2[2], x}  # the fast path's results and test: outside the run
    run = set(cone) | {i1, at}
    if any(r in keep for i in run for r in body[i][0].results):
        return None
    # the selects' second operands: every op only the run reads joins it (largest index
    # first, so each value's readers inside the run are known when it is decided)
    heap = [-g.producer[o][0] for o in (ops1[1], ops2[1]) if o in g.producer]
    heapq.heapify(heap)
    while heap:
        j = -heapq.heappop(heap)
        if j in run:
            continue
        op, operands = body[j]
        if op.regions or any(r in keep for r in op.results) or not all(
            g.reads[r] == sum(body[k][1].count(r) for k in g.readers(r) if k in run)
            for r in op.results
        ):  # fmt: skip
            continue
        run.add(j)
        for o in operands:
            if o in g.producer and not g.constant(o):
                heapq.heappush(heap, -g.producer[o][0])
    run_ids = sorted(run)
    if run_ids[-1] != at or not g.closed(body, run_ids, at, also=(i1,)):
        return None
    if any(k <= at for k in g.readers(s1.results[0])):  # read before the fused op's place
        return None
    run_ops = [body[i] for i in run_ids]
    made = {r for op, _ in run_ops for r in op.results}
    outer = tuple(dict.fromkeys(o for _, operands in run_ops for o in operands if o not in made))
    results = (s1.results[0], s2.results[0])
    types = (s1.result_types[0], s2.result_types[0])
    mask_name = body[mask_at][0].results[0]
    mask_t = body[mask_at][0].result_types[0]
    if not all(s >= 0 for s in mask_t.shape):
        return None
    predicate = _fallback([body[i] for i in cone if i != mask_at], (mask_name, *consts))
    slow = _fallback(run_ops, outer)
    impl = _override(outer, x, ops1[2], ops2[2], consts, p, mask_name, tuple(mask_t.shape),
                     predicate, slow)  # fmt: skip
    return _make_multi(results, types, outer, run_ops, impl, "nan_override"), run_ids


def _override(outer: tuple[str, ...], x: str, v0: str, i0: str, consts: list[str], p: str,
              mask: str, mask_shape: tuple[int, ...], predicate: OpFn, slow: OpFn) -> OpFn:
    """The fused callable of ``nan_override``."""
    at = {name: k for k, name in enumerate(outer)}
    x_at, v_at, i_at = at[x], at[v0], at[i0]
    c_at = [at[c] for c in consts]
    question = SimpleNamespace(results=[p])  # what the predicate's sub-run hands back
    checked: list[Any] = [None, False]  # [the constants last checked, predicate all false]

    def override(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        xs = args[x_at]
        total = float(xs.sum())  # a NaN anywhere makes it NaN (a quarter of isnan().any())
        if total != total and bool(torch.isnan(xs).any()):  # (inf - inf: look closer)
            return slow(op, args, run)
        cs = [args[k] for k in c_at]
        if checked[0] is None or any(a is not b for a, b in zip(checked[0], cs, strict=True)):
            none = torch.zeros(mask_shape, dtype=torch.bool)  # the mask of a NaN-free x
            value = predicate(question, [none, *cs], run)[0]  # type: ignore[arg-type]
            checked[:] = [cs, bool(value.dtype == torch.bool and not value.any())]
        if not checked[1]:
            return slow(op, args, run)
        return [args[v_at], args[i_at]]

    return override
