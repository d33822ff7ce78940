"""sort: multi-operand, along one dimension, ordered by a comparator region.

A comparator that is a single LT/GT compare of the first operand's pair maps onto a
stable ``torch.sort`` (the others follow by the same permutation); any other
comparator runs as a stable odd-even transposition sort whose compare steps evaluate
the comparator on whole columns at once through the interpreter.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter._ops_elementwise import _total_order_key
from torchneuron.compiler.interpreter._registry import Runner, register
from torchneuron.compiler.stablehlo.ir import Operation


def _simple_direction(op: Operation) -> tuple[str, str] | None:
    """(direction, compare_type) if the comparator is ``compare(arg0, arg1)``."""
    body, params = op.regions[0], op.region_args[0]
    if len(body) != 2 or body[0].name != "stablehlo.compare" or body[1].operands != body[0].results:
        return None
    if body[0].operands != [params[0][0], params[1][0]]:
        return None
    direction = body[0].attributes["comparison_direction"]
    if direction not in ("LT", "GT"):
        return None
    return direction, body[0].attributes.get("compare_type", "NOTYPE")


@register("stablehlo.sort")
def sort(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    dim = int(op.attributes.get("dimension", -1))
    xs = list(args)
    dim = dim % xs[0].dim() if xs[0].dim() else 0
    simple = _simple_direction(op)
    if simple is not None:
        direction, kind = simple
        key = xs[0]
        if kind == "TOTALORDER" and key.dtype.is_floating_point:
            key = _total_order_key(key)
        elif key.dtype == torch.bool:
            key = key.to(torch.uint8)
        perm = torch.sort(key, dim=dim, descending=direction == "GT", stable=True).indices
        return [torch.gather(x, dim, perm) for x in xs]
    return _transposition_sort(op, xs, dim, run)


def _transposition_sort(op: Operation, xs: list[torch.Tensor], dim: int, run: Runner) -> list[Any]:
    """Odd-even transposition sort: n rounds of neighbour compare-and-swap.

    Swapping only when ``comparator(right, left)`` holds keeps equal elements in
    order, so the sort is stable as StableHLO's ``is_stable`` may require.
    """
    cols = [x.movedim(dim, -1).clone() for x in xs]
    n = cols[0].shape[-1]
    for rnd in range(n):
        start = rnd % 2
        m = (n - start) // 2
        if m == 0:
            continue
        left = [c[..., start : start + 2 * m : 2] for c in cols]
        right = [c[..., start + 1 : start + 2 * m : 2] for c in cols]
        args: list[Any] = []
        for lo, hi in zip(right, left, strict=False):
            args += [lo, hi]
        swap = run.region(op, 0, args, batched=True)[0].expand(left[0].shape)
        for c, lo, hi in zip(cols, left, right, strict=False):
            new_left = torch.where(swap, hi, lo)
            new_right = torch.where(swap, lo, hi)
            c[..., start : start + 2 * m : 2] = new_left
            c[..., start + 1 : start + 2 * m : 2] = new_right
    return [c.movedim(-1, dim) for c in cols]
