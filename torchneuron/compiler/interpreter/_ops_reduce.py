"""Reductions: reduce, reduce_window (pooling) and select_and_scatter (pool backward).

A body that is a single add/multiply/max/min/and/or takes a torch fast path; any other
body (argmax's compare+select, for instance) is evaluated by the interpreter on whole
columns at once, pairing neighbours so the reduction needs only log2(n) body runs and
keeps "first wins" tie-breaking.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter._ops_shape import pad_tensor
from torchneuron.compiler.interpreter._registry import Runner, ints, register
from torchneuron.compiler.stablehlo.ir import Operation

_SIMPLE = {
    "stablehlo.add",
    "stablehlo.multiply",
    "stablehlo.maximum",
    "stablehlo.minimum",
    "stablehlo.and",
    "stablehlo.or",
}


def simple_body(op: Operation, index: int = 0) -> str | None:
    """The combiner's op name if region ``index`` is just ``return op(arg0, arg1)``."""
    if len(op.regions) <= index:
        return None
    body, params = op.regions[index], op.region_args[index]
    if len(body) != 2 or len(params) != 2:
        return None
    first, ret = body
    if first.name not in _SIMPLE or ret.operands != first.results:
        return None
    if sorted(first.operands) != sorted(p for p, _ in params):
        return None
    return first.name


def _fast_reduce(kind: str, x: torch.Tensor, dims: list[int]) -> torch.Tensor | None:
    """Reduce ``x`` over ``dims`` without the init value; None if no fast path."""
    if not dims:
        return x
    is_bool = x.dtype == torch.bool
    if kind == "stablehlo.add":
        return x.any(dim=dims) if is_bool else torch.sum(x, dim=dims, dtype=x.dtype)
    if kind in ("stablehlo.or", "stablehlo.maximum") and is_bool:
        return x.any(dim=dims)
    if kind in ("stablehlo.and", "stablehlo.minimum", "stablehlo.multiply") and is_bool:
        return x.all(dim=dims)
    if any(x.shape[d] == 0 for d in dims):
        return None
    if kind == "stablehlo.maximum":
        return torch.amax(x, dim=dims)
    if kind == "stablehlo.minimum":
        return torch.amin(x, dim=dims)
    if kind == "stablehlo.multiply":
        for d in sorted(dims, reverse=True):
            x = torch.prod(x, dim=d, dtype=x.dtype)
        return x
    return None


_COMBINE = {
    "stablehlo.add": lambda a, b: torch.logical_or(a, b) if a.dtype == torch.bool else a + b,
    "stablehlo.multiply": lambda a, b: torch.logical_and(a, b) if a.dtype == torch.bool else a * b,
    "stablehlo.maximum": torch.maximum,
    "stablehlo.minimum": torch.minimum,
    "stablehlo.and": torch.bitwise_and,
    "stablehlo.or": torch.bitwise_or,
}


def reduce_tensors(
    op: Operation, xs: list[torch.Tensor], inits: list[torch.Tensor], dims: list[int], run: Runner
) -> list[torch.Tensor]:
    """Reduce every tensor of ``xs`` over ``dims`` with the body of ``op`` (region 0)."""
    kind = simple_body(op)
    if kind is not None and len(xs) == 1:
        r = _fast_reduce(kind, xs[0], dims)
        if r is not None:
            return [_COMBINE[kind](r, inits[0].to(r.dtype)).to(xs[0].dtype)]
    n = len(xs)
    keep = [d for d in range(xs[0].dim()) if d not in dims]
    out_shape = [xs[0].shape[d] for d in keep]
    width = _prod([xs[0].shape[d] for d in dims])
    cols = [x.permute(keep + list(dims)).reshape(_prod(out_shape), width) for x in xs]
    while cols[0].shape[1] > 1:
        width = cols[0].shape[1]
        half = width // 2
        a = [c[:, 0 : 2 * half : 2] for c in cols]
        b = [c[:, 1 : 2 * half : 2] for c in cols]
        merged = run.region(op, 0, a + b, batched=True)
        merged = [m.expand(c[:, :half].shape) for m, c in zip(merged, cols, strict=False)]
        if width % 2:  # the odd last column waits for the next round
            merged = [
                torch.cat([m, c[:, 2 * half :]], dim=1) for m, c in zip(merged, cols, strict=False)
            ]
        cols = merged
    k = cols[0].shape[0]
    if cols[0].shape[1] == 0:
        return [i.expand(out_shape).clone() for i in inits]
    acc = [i.reshape(1).expand(k) for i in inits]
    res = run.region(op, 0, acc + [c[:, 0] for c in cols], batched=True)
    return [r.expand(k).reshape(out_shape) for r in res[:n]]


def _prod(shape: list[int]) -> int:
    p = 1
    for s in shape:
        p *= s
    return p


@register("stablehlo.reduce")
def reduce(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    n = len(args) // 2
    return reduce_tensors(op, list(args[:n]), list(args[n:]), ints(op, "dimensions"), run)


def _padded(
    x: torch.Tensor, pad_value: torch.Tensor, op: Operation
) -> tuple[torch.Tensor, list[int]]:
    """Apply the window op's padding and base dilation; also returns the low pads."""
    r = x.dim()
    base = ints(op, "base_dilations", [1] * r)
    padding = ints(op, "padding", [0] * (2 * r))
    low, high = padding[0::2], padding[1::2]
    return pad_tensor(x, pad_value, low, high, [b - 1 for b in base]), low


def _unfold(x: torch.Tensor, op: Operation) -> tuple[torch.Tensor, list[int]]:
    """View (already padded) ``x`` as [out..., window...]; returns the window shape too."""
    r = x.dim()
    wdims = ints(op, "window_dimensions")
    strides = ints(op, "window_strides", [1] * r)
    wdil = ints(op, "window_dilations", [1] * r)
    for d in range(r):
        x = x.unfold(d, (wdims[d] - 1) * wdil[d] + 1, strides[d])
        if wdil[d] > 1:
            x = x[..., :: wdil[d]]
    return x, list(x.shape[r:])


@register("stablehlo.reduce_window")
def reduce_window(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    n = len(args) // 2
    xs, inits = list(args[:n]), list(args[n:])
    if xs[0].numel() == 0:  # every window holds only padding: the init value (ATen: empty)
        return [i.expand(t.shape).clone() for i, t in zip(inits, op.result_types, strict=False)]
    r = xs[0].dim()
    wins = [_unfold(_padded(x, i, op)[0], op)[0] for x, i in zip(xs, inits, strict=False)]
    return reduce_tensors(op, wins, inits, list(range(r, 2 * r)), run)


def _select_pad_value(op: Operation, x: torch.Tensor) -> torch.Tensor:
    """Pad with a value the select body never prefers (e.g. -inf for a GE max-pool)."""
    direction = None
    body = op.regions[0]
    if body and body[0].name == "stablehlo.compare":
        direction = body[0].attributes.get("comparison_direction")
    if x.dtype.is_floating_point:
        lo, hi = float("-inf"), float("inf")
    elif x.dtype == torch.bool:
        lo, hi = False, True
    else:
        lo, hi = torch.iinfo(x.dtype).min, torch.iinfo(x.dtype).max
    value = hi if direction in ("LE", "LT") else lo
    return torch.tensor(value, dtype=x.dtype)


@register("stablehlo.select_and_scatter")
def select_and_scatter(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    x, source, init = args
    padded, low = _padded(x, _select_pad_value(op, x), op)
    wins, wshape = _unfold(padded, op)
    padded_shape = list(padded.shape)
    pos_w, _ = _unfold(torch.arange(padded.numel()).reshape(padded_shape), op)
    vals = wins.reshape(-1, _prod(wshape))
    idx = pos_w.reshape(-1, _prod(wshape))
    while vals.shape[1] > 1:
        width = vals.shape[1]
        half = width // 2
        a, b = vals[:, 0 : 2 * half : 2], vals[:, 1 : 2 * half : 2]
        ia, ib = idx[:, 0 : 2 * half : 2], idx[:, 1 : 2 * half : 2]
        pick_a = run.region(op, 0, [a, b], batched=True)[0].expand(a.shape)
        v, i = torch.where(pick_a, a, b), torch.where(pick_a, ia, ib)
        if width % 2:
            v, i = torch.cat([v, vals[:, 2 * half :]], 1), torch.cat([i, idx[:, 2 * half :]], 1)
        vals, idx = v, i
    chosen = idx[:, 0]
    src = source.reshape(-1)
    out = init.reshape(()).expand(padded_shape).clone().reshape(-1)
    if simple_body(op, 1) == "stablehlo.add":
        out.index_add_(0, chosen, src.to(out.dtype))
    else:
        for j in range(src.numel()):
            k = int(chosen[j])
            out[k] = run.region(op, 1, [out[k], src[j]])[0]
    out = out.reshape(padded_shape)
    return [out[tuple(slice(lo, lo + n) for lo, n in zip(low, x.shape, strict=False))]]
