"""Load-time absorption of broadcasts and transposes into the ops that read them.

Why: StableHLO has no implicit broadcasting, so the lowering writes every
``x - mean`` with a per-channel ``mean`` as ``broadcast_in_dim`` + ``subtract``;
BatchNorm and LayerNorm alone emit dozens of them per training step, and each costs the
interpreter a step (an ``expand`` and its Python around it). torch broadcasts by itself:
when the broadcast only adds leading dims and stretches size-1 dims (numpy's rule), and
every reader is an elementwise op whose other operand already has the full shape, the
readers can take the broadcast's operand directly and the broadcast is dropped.

The values are the same elements, so the results are the same bits; a reader's result
keeps its declared full shape (its other operand has it), which the interpreter checks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from torchneuron.compiler.interpreter._registry import ints
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["absorb_broadcasts", "absorb_transposes"]

Body = list[tuple[Operation, tuple[str, ...]]]

# Elementwise ops whose implementations (generic and specialized) broadcast like torch.
_READERS = ("stablehlo.add", "stablehlo.subtract", "stablehlo.multiply", "stablehlo.divide",
            "stablehlo.maximum", "stablehlo.minimum", "stablehlo.compare")  # fmt: skip


def _numpy_like(op: Operation) -> bool:
    """A broadcast torch's implicit broadcasting does the same way."""
    if len(op.operands) != 1:
        return False
    src, dst = op.operand_types[0].shape, op.result_types[0].shape
    if not all(s >= 0 for s in (*src, *dst)) or op.operand_types[0].dtype != op.result_types[0].dtype:
        return False
    dims = ints(op, "broadcast_dimensions")
    lead = len(dst) - len(src)
    return dims == list(range(lead, len(dst))) and all(
        s in (1, dst[d]) for s, d in zip(src, dims, strict=True)
    )


def absorb_broadcasts(body: Body, returns: tuple[str, ...] | None, pinned: set[str]) -> Body:
    """``body`` with the absorbable broadcasts dropped and their readers rewired."""
    readers: dict[str, list[int]] = defaultdict(list)
    for i, (_, operands) in enumerate(body):
        for o in operands:
            readers[o].append(i)
    kept_out = set(returns or ()) | pinned
    declared: dict[str, tuple[int, ...]] = {}
    for op, operands in body:
        for name, t in zip(operands, op.operand_types, strict=False):
            declared.setdefault(name, t.shape)
    absorbed: dict[str, str] = {}  # broadcast result -> its operand
    drop: set[int] = set()
    for i, (op, operands) in enumerate(body):
        if op.name != "stablehlo.broadcast_in_dim" or not _numpy_like(op):
            continue
        out, full = op.results[0], op.result_types[0].shape
        if out in kept_out or not readers[out]:
            continue
        ok = True
        for j in readers[out]:
            r_op, r_operands = body[j]
            if (
                r_op.name not in _READERS or len(r_operands) != 2 or r_op.regions
                or r_operands[0] == r_operands[1] or r_op.result_types[0].shape != full
            ):  # fmt: skip
                ok = False
                break
            other = r_operands[1] if r_operands[0] == out else r_operands[0]
            if other in absorbed or declared.get(other) != full:
                ok = False
                break
        if ok:
            absorbed[out] = operands[0]
            drop.add(i)
    if not absorbed:
        return body
    return [
        (op, tuple(absorbed.get(o, o) for o in operands))
        for i, (op, operands) in enumerate(body) if i not in drop
    ]  # fmt: skip


def absorb_transposes(body: Body, returns: tuple[str, ...] | None, pinned: set[str]) -> Body:
    """``body`` with each transpose read only by one ``dot_general`` folded into that
    op's dimension numbers (the op then reads the transpose's operand).

    Why: every linear layer's weight, and attention's heads, reach ``dot_general``
    through a ``transpose``; ``dot_general`` permutes its operands anyway, and
    ``x.permute(p).permute(q)`` is the view ``x.permute(p[q])``: the same ``bmm`` on the
    same elements. Done only when the free dims keep their order, so the result's
    layout is unchanged.
    """
    readers: dict[str, int] = defaultdict(int)
    for _, operands in body:
        for o in operands:
            readers[o] += 1
    kept_out = set(returns or ()) | pinned
    producer = {op.results[0]: (i, op, operands) for i, (op, operands) in enumerate(body)
                if len(op.results) == 1}  # fmt: skip
    drop: set[int] = set()
    out = list(body)
    for i, (op, operands) in enumerate(body):
        if op.name != "stablehlo.dot_general" or len(operands) != 2:
            continue
        dn = dict(op.attributes["dot_dimension_numbers"])
        new_operands = list(operands)
        types = list(op.operand_types)
        changed = False
        for side, (b_key, c_key) in enumerate((
            ("lhs_batching_dimensions", "lhs_contracting_dimensions"),
            ("rhs_batching_dimensions", "rhs_contracting_dimensions"),
        )):  # fmt: skip
            hit = producer.get(operands[side])
            if (
                hit is None or hit[1].name != "stablehlo.transpose" or len(hit[2]) != 1
                or readers[operands[side]] != 1 or operands[side] in kept_out
                or operands[0] == operands[1]
            ):  # fmt: skip
                continue
            perm = ints(hit[1], "permutation")
            b, c = list(dn.get(b_key, [])), list(dn[c_key])
            free = [d for d in range(len(perm)) if d not in b and d not in c]
            moved = [perm[d] for d in free]
            if moved != sorted(moved):
                continue
            dn[b_key], dn[c_key] = [perm[d] for d in b], [perm[d] for d in c]
            new_operands[side] = hit[2][0]
            types[side] = hit[1].operand_types[0]
            drop.add(hit[0])
            changed = True
        if changed:
            new_op = replace(op, operand_types=types,
                             attributes={**op.attributes, "dot_dimension_numbers": dn})  # fmt: skip
            out[i] = (new_op, tuple(new_operands))
    if not drop:
        return body
    return [entry for i, entry in enumerate(out) if i not in drop]
