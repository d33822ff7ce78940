"""Load-time absorption of broadcasts into the elementwise ops that read them.

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

from ._registry import ints
from .ir import Operation

__all__ = ["absorb_broadcasts"]

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
