"""Max-pooling's windows as the lowering spells them, each recognised as one collapsed op.

The forward (one strided slice per window position, a concatenate, a reshape and a
two-result reduce: max with its first index), its backward (a concatenate of iotas with
the saved index and a scatter-add) and a one-hot select summed over a dim (a lookup).
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import (
    OpFn,
    Runner,
    ints,
)
from torchneuron.compiler.interpreter._specialize_math import select
from torchneuron.compiler.interpreter.collapse.base import (
    Body,
    Collapsed,
    _fallback,
    _Graph,
    _make,
    _type_of,
)
from torchneuron.compiler.interpreter.collapse.pool import native_max_pool2d
from torchneuron.compiler.stablehlo.ir import Operation

__all__: list[str] = []


def _slice_chain(g: _Graph, name: str) -> tuple[str, list[int], list[int], list[int]] | None:
    """Follow single-use slices back from ``name``: (source, start, stride, ids)."""
    start: list[int] | None = None
    stride: list[int] | None = None
    ids: list[int] = []
    while True:
        hit = g.op(name, "stablehlo.slice")
        if hit is None:
            break
        i, op, operands = hit
        s, st = ints(op, "start_indices"), ints(op, "strides", [1] * len(op.result_types[0].shape))
        if start is None or stride is None:
            start, stride = s, st
        else:  # this slice feeds the one seen before: compose (outer after inner)
            start = [a + b * c for a, b, c in zip(s, start, st, strict=True)]
            stride = [a * b for a, b in zip(st, stride, strict=True)]
        ids.append(i)
        name = operands[0]
    if start is None or stride is None:
        return None
    return name, start, stride, ids


def _max_pool_forward(g: _Graph, body: Body, at: int) -> tuple[Collapsed, list[int]] | None:
    from torchneuron.compiler.interpreter._specialize import _is_max_with_first_index

    red, operands = body[at]
    if red.name != "stablehlo.reduce" or len(operands) != 4 or len(red.results) != 2:
        return None
    dims = ints(red, "dimensions")
    if len(dims) != 1 or not _is_max_with_first_index(red):
        return None
    cd = dims[0]
    values_t = red.operand_types[0]
    if red.result_types[1].dtype not in ("i64", "si64") or values_t.dtype not in (
        "f32", "f64", "bf16", "f16"
    ):  # fmt: skip
        return None
    iota = g.producer.get(operands[1])
    if (
        iota is None or iota[1].name != "stablehlo.iota"
        or int(iota[1].attributes.get("iota_dimension", -1)) != cd
    ):  # fmt: skip
        return None
    reshape = g.op(operands[0], "stablehlo.reshape")
    if reshape is None:
        return None
    cat = g.op(reshape[2][0], "stablehlo.concatenate")
    if cat is None or int(cat[1].attributes["dimension"]) != cd:
        return None
    piece_t = cat[1].operand_types[0]
    k = len(cat[2])
    if list(values_t.shape) != list(piece_t.shape[:cd]) + [k] + list(piece_t.shape[cd:]):
        return None
    chains = [_slice_chain(g, p) for p in cat[2]]
    if any(c is None for c in chains) or any(t != piece_t for t in cat[1].operand_types):
        return None
    sources = {c[0] for c in chains if c is not None}
    if len(sources) != 1:
        return None
    src = sources.pop()
    src_t = _type_of(body, g, src)
    if src_t is None or len(src_t.shape) != len(piece_t.shape) or not all(
        s >= 0 for s in (*src_t.shape, *values_t.shape, *red.result_types[0].shape)
    ):  # static shapes only: the window views are built from them
        return None
    rank = len(src_t.shape)
    first = chains[0]
    assert first is not None
    stride = first[2]
    if any(c is None or c[2] != stride for c in chains):
        return None
    # pooled dims: those whose start differs between window positions
    pooled = [d for d in range(rank) if len({c[1][d] for c in chains if c is not None}) > 1]
    kernel = [1 + max(c[1][d] for c in chains if c is not None) for d in pooled]
    for d in range(rank):
        if d not in pooled and (stride[d] != 1 or first[1][d] != 0
                                or piece_t.shape[d] != src_t.shape[d]):  # fmt: skip
            return None
    # window positions in row-major order over the pooled dims, every offset present
    expect = [[0] * rank for _ in range(k)]
    total = 1
    for kd in kernel:
        total *= kd
    if total != k:
        return None
    for idx in range(k):
        rem = idx
        for d, kd in reversed(list(zip(pooled, kernel, strict=True))):
            expect[idx][d] = rem % kd
            rem //= kd
    for c, want in zip(chains, expect, strict=True):
        assert c is not None
        if c[1] != want:
            return None
    for d, kd in zip(pooled, kernel, strict=True):
        if piece_t.shape[d] != (src_t.shape[d] - kd) // stride[d] + 1 or src_t.shape[d] < kd:
            return None
    out_shape = tuple(red.result_types[0].shape)
    windows = [  # each window position's elements: the composed slices as one view
        tuple(slice(c[1][d], c[1][d] + stride[d] * (piece_t.shape[d] - 1) + 1, stride[d])
              for d in range(rank))
        for c in chains if c is not None
    ]  # fmt: skip
    run_ids = sorted({i for c in chains if c is not None for i in c[3]} | {cat[0], reshape[0], at})
    if not g.closed(body, run_ids, at):
        return None
    run_ops = [body[i] for i in run_ids]
    outer = (src, operands[1], operands[2], operands[3])
    slow = _fallback(run_ops, outer)

    def max_pool(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x, _, init, _ = args
        # a NaN anywhere makes the sum NaN (an inf - inf only costs a needless exact run)
        if bool(torch.isnan(x.sum())):  # NaN: the tree's pairing order decides, run it
            return slow(op, args, run)
        pieces = [x[w] for w in windows]  # strided views, no copies
        v, i = pieces[0], None
        for kk in range(1, k):  # a strictly greater later element wins: the first maximum
            p = pieces[kk]
            gt = p > v
            v = select(gt, p, v)
            i = gt.to(torch.int64) if i is None else torch.where(gt, kk, i)
        if i is None:
            i = torch.zeros(v.shape, dtype=torch.int64)
        if not bool((v > init).all()):  # init wins somewhere: the exact run
            return slow(op, args, run)
        return [v.reshape(out_shape), i.reshape(out_shape)]

    if pooled == [rank - 2, rank - 1] and out_shape == tuple(piece_t.shape):
        native = native_max_pool2d(tuple(src_t.shape), kernel, stride, out_shape, slow)
        if native is not None:
            fused = _make(red, outer, run_ops, native, "max_pool_window")
            fused.attributes["native_pool"] = (tuple(src_t.shape), kernel, stride)  # for
            return fused, run_ids  # ``pool_flat``, which may take this run in
    fused = _make(red, outer, run_ops, max_pool, "max_pool_window")
    return fused, run_ids


def _max_pool_backward(g: _Graph, body: Body, at: int) -> tuple[Collapsed, list[int]] | None:
    from torchneuron.compiler.interpreter._ops_reduce import simple_body

    sc, operands = body[at]
    if sc.name != "stablehlo.scatter" or len(operands) != 3 or simple_body(sc) != "stablehlo.add":
        return None
    dn = sc.attributes["scatter_dimension_numbers"]
    shape = list(sc.operand_types[0].shape)
    r = len(shape)
    idx_t, upd_t = sc.operand_types[1], sc.operand_types[2]
    if (
        r < 1 or not all(s >= 0 for s in (*shape, *idx_t.shape, *upd_t.shape))
        or list(dn.get("update_window_dims", []))
        or dn.get("input_batching_dims") or list(dn["inserted_window_dims"]) != list(range(r))
        or list(dn["scattered_dims_to_operand_dims"]) != list(range(r))
        or int(dn["index_vector_dim"]) != len(idx_t.shape) - 1 or idx_t.shape[-1] != r
        or list(upd_t.shape) != list(idx_t.shape[:-1]) or len(upd_t.shape) != r
        or list(upd_t.shape[:-1]) != shape[:-1] or sc.operand_types[0].dtype == "i1"
        or sc.operand_types[0].dtype != upd_t.dtype
    ):  # fmt: skip
        return None
    cat = g.op(operands[1], "stablehlo.concatenate")
    if cat is None or int(cat[1].attributes["dimension"]) != r or len(cat[2]) != r:
        return None
    piece_shape = [*upd_t.shape, 1]
    for j, piece in enumerate(cat[2][:-1]):  # leading coordinates: the update's own position
        iota = g.producer.get(piece)
        if (
            iota is None or iota[1].name != "stablehlo.iota"
            or int(iota[1].attributes.get("iota_dimension", -1)) != j
            or list(iota[1].result_types[0].shape) != piece_shape
        ):  # fmt: skip
            return None
    last = cat[2][-1]
    run_ids = [cat[0], at]
    index = last
    reshape = g.op(last, "stablehlo.reshape")
    if reshape is not None and g.reads[last] == 1:  # the saved index, given a unit dim
        run_ids.insert(0, reshape[0])
        index = reshape[2][0]
    if not g.closed(body, run_ids, at):
        return None
    run_ops = [body[i] for i in run_ids]
    outer = (operands[0], *cat[2][:-1], index, operands[2])
    n_iota = r - 1
    slow = _fallback(run_ops, outer)
    size = shape[-1]
    upd_shape = tuple(upd_t.shape)

    def scatter_add(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        z, idx, u = args[0], args[1 + n_iota], args[2 + n_iota]
        idx = idx.reshape(upd_shape)
        if idx.dtype != torch.int64:
            idx = idx.to(torch.int64)
        if not _in_range(idx, size):
            return slow(op, args, run)  # out-of-range updates are dropped there
        return [z.clone().scatter_add_(r - 1, idx, u)]

    return _make(sc, outer, run_ops, scatter_add, "max_pool_scatter"), run_ids


def _one_hot_lookup(g: _Graph, body: Body, at: int) -> tuple[Collapsed, list[int]] | None:
    """``reduce_add_d(select(i == arange_d, table, 0))`` over integers: ``table`` at ``i``.

    Max-pooling with indices turns each window's position of the maximum into its flat
    input index this way (compare the position with every window position, select that
    position's offset, sum). With ``i`` constant along ``d`` (broadcast from size 1),
    exactly one term is nonzero when ``0 <= i < K`` and none otherwise, so the sum is
    one ``gather`` (integers: exact in any order). The run is fused only when the
    ``arange``, zeros and init operands are program constants (kept by the interpreter:
    the same tensors, never written, on every run; a runtime input could be written in
    place between runs); they are checked by value on the first run and the check is
    kept for those tensors. If they are not what this needs, the original ops run.
    """
    red, operands = body[at]
    if red.name != "stablehlo.reduce" or len(operands) != 2 or len(red.results) != 1:
        return None
    from torchneuron.compiler.interpreter._ops_reduce import simple_body

    dims = ints(red, "dimensions")
    dt = red.operand_types[0].dtype
    if simple_body(red) != "stablehlo.add" or len(dims) != 1 or dt not in ("i32", "i64",
                                                                           "si32", "si64"):
        return None
    d = dims[0]
    sel = g.op(operands[0], "stablehlo.select")
    if sel is None:
        return None
    full = tuple(sel[1].result_types[0].shape)
    cmp = g.op(sel[2][0], "stablehlo.compare")
    if (
        cmp is None or cmp[1].attributes.get("comparison_direction") != "EQ"
        or not all(s >= 0 for s in full) or tuple(sel[1].operand_types[1].shape) != full
        or tuple(sel[1].operand_types[2].shape) != full
        or cmp[1].operand_types[0].dtype not in ("i32", "i64", "si32", "si64")
    ):  # fmt: skip
        return None
    for side in (0, 1):  # which compare operand is the index broadcast along d
        bc = g.op(cmp[2][side], "stablehlo.broadcast_in_dim")
        if bc is None or len(bc[2]) != 1:
            continue
        src_shape = tuple(bc[1].operand_types[0].shape)
        if (
            len(src_shape) != len(full) or src_shape[d] != 1
            or ints(bc[1], "broadcast_dimensions") != list(range(len(full)))
            or any(s != f for i, (s, f) in enumerate(zip(src_shape, full, strict=True))
                   if i != d)
        ):  # fmt: skip
            continue
        run_ids = sorted({bc[0], cmp[0], sel[0], at})
        if not g.closed(body, run_ids, at):
            continue
        run_ops = [body[i] for i in run_ids]
        outer = (bc[2][0], cmp[2][1 - side], sel[2][1], sel[2][2], operands[1])
        if not all(g.constant(o) for o in (outer[1], outer[3], outer[4])):
            continue  # read at run time: a check made once could go stale
        slow = _fallback(run_ops, outer)
        lookup = _lookup(full, d, tuple(red.result_types[0].shape), slow)
        return _make(red, outer, run_ops, lookup, "one_hot_lookup"), run_ids
    return None


def _lookup(full: tuple[int, ...], d: int, out_shape: tuple[int, ...], slow: OpFn) -> OpFn:
    """The fused callable of ``_one_hot_lookup``."""
    k = full[d]
    arange_view = [1] * len(full)
    arange_view[d] = k
    checked: list[Any] = [None, False]  # [the constants last checked, whether they fit]

    def lookup(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        idx, ar, table, zero, init = args
        consts = (ar, zero, init)
        if checked[0] is None or any(a is not b for a, b in zip(checked[0], consts,
                                                                strict=True)):  # fmt: skip
            expect = torch.arange(k, dtype=ar.dtype).reshape(arange_view).expand(full)
            checked[:] = [consts, bool(
                torch.equal(ar.expand(full), expect) and not bool(zero.any())
                and int(init) == 0
            )]  # fmt: skip
        if not checked[1] or table.dtype != zero.dtype:
            return slow(op, args, run)
        i = idx.to(torch.int64)
        if _in_range(i, k):  # the usual case: every index hits
            return [table.expand(full).gather(d, i).reshape(out_shape)]
        picked = table.expand(full).gather(d, i.clamp(0, k - 1))
        return [torch.where((i >= 0) & (i < k), picked, 0).to(table.dtype).reshape(out_shape)]

    return lookup


def _in_range(i: torch.Tensor, size: int) -> bool:
    """Whether every element of the integer tensor ``i`` is in ``[0, size)`` (one pass
    for both bounds)."""
    if not i.numel():
        return True
    lo, hi = torch.aminmax(i)
    return int(lo) >= 0 and int(hi) < size
