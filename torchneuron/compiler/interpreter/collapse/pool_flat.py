"""Max-pooling's forward and its flat indices as ATen's kernel alone.

Why: max-pooling with indices lowers to the pool proper (each window's maximum and
its window position: ``window``'s ``max_pool_window``) followed by a lookup turning the
position into the flat input index (``window``'s ``one_hot_lookup``: a constant table of
each window position's flat index, indexed by the position). Over the two trailing dims
the pool runs as ``aten.max_pool2d_with_indices`` (``pool``), which computes the
flat index itself; then the pool fusion maps it back to a window position and the lookup
maps that to the flat index again. Two lookups for nothing: on the CNN loop's pools
about a third of the pool's time. Here the whole run is one op giving the kernel's
value and flat index, when the lookup's table holds, for every window position, the flat
index of that position in the pooled plane (so the lookup would give back the kernel's
index).

The table is a program constant (the interpreter keeps it: the same tensor on every run)
and is checked by value on the first run, with the lookup's other constants; the check
is kept for those tensors. Without padding it holds; a padded pool's table points into
the unpadded input, so there (or with anything else unexpected) the pool and lookup
fusions' own fast paths run, one after the other, as they would have unfused.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import OpFn, Runner, ints
from torchneuron.compiler.interpreter.collapse.base import _make_multi
from torchneuron.compiler.interpreter.collapse.pool import pool_with_flat_index
from torchneuron.compiler.interpreter.collapse.window import _max_pool_forward, _one_hot_lookup
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["max_pool_flat_index"]


def max_pool_flat_index(g: Any, body: Any, at: int) -> tuple[Any, list[int]] | None:
    """The native pool, the reshape of its positions and their lookup (ending at
    ``body[at]``, the lookup's reduce) as one op with the pool's value and flat index."""
    lookup = _one_hot_lookup(g, body, at)
    if lookup is None:
        return None
    lk, lk_ids = lookup
    idx = lk.operands[0]
    rs = g.op(idx, "stablehlo.reshape")
    if rs is None or g.reads[idx] != 1 or rs[0] in lk_ids:
        return None
    pos = rs[2][0]
    prod = g.producer.get(pos)
    if prod is None or g.reads[pos] != 1 or len(prod[1].results) != 2:
        return None
    red_at, red, _ = prod
    if pos != red.results[1]:
        return None
    pool = _max_pool_forward(g, body, red_at)
    if pool is None or "native_pool" not in pool[0].attributes:
        return None
    pf, pool_ids = pool
    src_shape, kernel, stride = pf.attributes["native_pool"]
    out_t, pos_t = red.result_types
    lk_t = lk.result_types[0]
    full = tuple(lk.operand_types[2].shape)  # the table's (expanded) shape
    if (
        lk_t.dtype not in ("i64", "si64") or tuple(lk_t.shape) != tuple(pos_t.shape)
        or tuple(out_t.shape) != tuple(pos_t.shape) or len(full) != len(pos_t.shape) + 1
        or tuple(full[:-3] + full[-2:]) != tuple(pos_t.shape)
        or full[-3] != kernel[0] * kernel[1]
        or ints(body[at][0], "dimensions") != [len(full) - 3]  # positions: before the plane
        or tuple(rs[1].result_types[0].shape) != (*full[:-3], 1, *full[-2:])
    ):  # fmt: skip
        return None
    run_ids = sorted(set(pool_ids) | {rs[0]} | set(lk_ids))
    if run_ids[-1] != at or not g.closed(body, run_ids, at, also=(red_at,)):
        return None
    v_name = red.results[0]
    if any(k <= at for k in g.readers(v_name)):  # read before the fused op's place
        return None
    run_ops = [body[i] for i in run_ids]
    outer = (*pf.operands, *lk.operands[1:])
    impl = _pool_flat(pf, lk, tuple(rs[1].result_types[0].shape), src_shape, kernel, stride,
                      full)  # fmt: skip
    results = (v_name, lk.results[0])
    return _make_multi(results, (out_t, lk_t), outer, run_ops, impl, "max_pool_flat"), run_ids


def _expected_table(src_shape: tuple[int, ...], kernel: list[int], stride: list[int],
                    full: tuple[int, ...]) -> torch.Tensor:  # fmt: skip
    """Each window position's flat index in the pooled plane: ``[K, OH, OW]``."""
    w_in = src_shape[-1]
    kh, kw = kernel
    sh, sw = stride[-2], stride[-1]
    oh, ow = full[-2], full[-1]
    dh = torch.arange(kh * kw) // kw
    dw = torch.arange(kh * kw) % kw
    rows = torch.arange(oh)[None, :, None] * sh + dh[:, None, None]
    cols = torch.arange(ow)[None, None, :] * sw + dw[:, None, None]
    return rows * w_in + cols


def _pool_flat(pf: Any, lk: Any, idx_shape: tuple[int, ...], src_shape: tuple[int, ...],
               kernel: list[int], stride: list[int], full: tuple[int, ...]) -> OpFn:
    """The fused callable of ``max_pool_flat_index``."""
    pool = pool_with_flat_index(src_shape, kernel, stride)
    expect = _expected_table(src_shape, kernel, stride, full)
    n_pool = len(pf.operands)
    k = full[-3]
    arange_view = [1] * len(full)
    arange_view[-3] = k
    checked: list[Any] = [None, False]  # [the lookup's constants last checked, they fit]

    def unfused(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        v, position = pf.impl(pf, list(args[:n_pool]), run)
        (flat,) = lk.impl(lk, [position.reshape(idx_shape), *args[n_pool:]], run)
        return [v, flat]

    def max_pool_flat(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        ar, table, zero, init = args[n_pool:]
        consts = (ar, table, zero, init)
        if checked[0] is None or any(a is not b for a, b in zip(checked[0], consts,
                                                                strict=True)):  # fmt: skip
            arange = torch.arange(k, dtype=ar.dtype).reshape(arange_view).expand(full)
            checked[:] = [consts, bool(
                table.dtype == torch.int64 and zero.dtype == table.dtype
                and torch.equal(ar.expand(full), arange) and not bool(zero.any())
                and int(init) == 0 and torch.equal(table.expand(full), expect.expand(full))
            )]  # fmt: skip
        if not checked[1]:
            return unfused(op, args, run)
        hit = pool(args[0], args[2])
        if hit is None:  # a NaN, or init wins somewhere: the two fusions decide
            return unfused(op, args, run)
        return list(hit)

    return max_pool_flat
