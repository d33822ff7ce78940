"""Load-time specializations of ``gather`` and ``scatter`` for whole rows and elements.

Why: the generic implementations (``_ops_gather``) turn the dimension numbers into one
index tensor per operand dimension on every call: a dozen small torch calls around
the one that moves data. The forms the zoo's programs use most are simple: an
embedding lookup gathers whole rows (``index_select``), its gradient scatter-adds whole
rows (``index_add_``), and cross-entropy gathers one element per row (a flat ``take``).
Each specialization gives the generic implementation's bits: gather clamps start
indices into range as StableHLO says (and as the generic path does), scatter drops
out-of-range updates, and ``index_add_`` adds the updates in the same order (update
order, per target row) as the generic flat ``index_add_``.

``scatter`` already has a specializer (``_specialize``, whole elements): the one here
tries its own form first and hands every other op to that one.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import OpFn, Runner, ints, static
from torchneuron.compiler.interpreter._specialize import SPECIALIZERS, specializer
from torchneuron.compiler.stablehlo.ir import Operation

__all__: list[str] = []



def _index_shape(idx_shape: tuple[int, ...], ivd: int, width: int) -> tuple[int, ...] | None:
    """The batch shape of a start-index tensor whose index vectors have ``width``
    entries along ``ivd`` (implicit when ``ivd`` is the rank), or None."""
    if ivd == len(idx_shape):
        return tuple(idx_shape) if width == 1 else None
    if ivd == len(idx_shape) - 1 and idx_shape[-1] == width:
        return tuple(idx_shape[:-1])
    return None


@specializer("stablehlo.gather")
def _gather(op: Operation) -> OpFn | None:
    dn = op.attributes["dimension_numbers"]
    x_t, idx_t = op.operand_types
    shape, r = tuple(x_t.shape), len(x_t.shape)
    if (
        r < 1 or not static(shape) or not static(idx_t.shape) or shape[0] < 1
        or dn.get("operand_batching_dims") or dn.get("start_indices_batching_dims")
        or idx_t.dtype not in ("i32", "i64", "si32", "si64")
    ):  # fmt: skip
        return None
    ivd = int(dn["index_vector_dim"])
    sizes = ints(op, "slice_sizes")
    collapsed = list(dn["collapsed_slice_dims"])
    starts = list(dn["start_index_map"])
    out_shape = tuple(op.result_types[0].shape)
    rows = _index_shape(tuple(idx_t.shape), ivd, 1)
    nb = len(rows) if rows is not None else -1
    if (
        rows is not None and starts == [0] and collapsed == [0] and sizes == [1, *shape[1:]]
        and list(dn["offset_dims"]) == list(range(nb, nb + r - 1))
        and out_shape == (*rows, *shape[1:])
    ):  # fmt: skip
        last = shape[0] - 1

        def take_rows(op: Operation, args: list[Any], run: Runner) -> list[Any]:
            x, idx = args
            i = idx.reshape(-1).to(torch.int64).clamp(0, last)
            return [x.index_select(0, i).reshape(out_shape)]

        return take_rows
    batch = _index_shape(tuple(idx_t.shape), ivd, r)
    if (
        batch is not None and starts == list(range(r)) and collapsed == list(range(r))
        and sizes == [1] * r and not list(dn["offset_dims"]) and out_shape == batch
        and ivd == len(idx_t.shape) - 1
    ):  # fmt: skip
        lows = torch.zeros(r, dtype=torch.int64)
        highs = torch.tensor([s - 1 for s in shape], dtype=torch.int64)
        strides = torch.tensor([int(torch.Size(shape[d + 1:]).numel()) for d in range(r)],
                               dtype=torch.int64)  # fmt: skip
        if not all(s >= 1 for s in shape):
            return None  # nothing to take from: the generic path says so

        def take_elements(op: Operation, args: list[Any], run: Runner) -> list[Any]:
            # (integer products summed by ``matmul``: exact, in any order; ``take``
            # reads ``x`` in row-major order whatever its strides, as a flat view does)
            x, idx = args
            if idx.dtype is not torch.int64:
                idx = idx.to(torch.int64)
            flat = idx.clamp(lows, highs) @ strides  # clamped into range, as StableHLO says
            return [torch.take(x, flat)]  # (the index's batch shape is the result's)

        return take_elements
    return None


_SCATTER_BEFORE = SPECIALIZERS.get("stablehlo.scatter")


@specializer("stablehlo.scatter")
def _scatter(op: Operation) -> OpFn | None:
    """Whole rows added at computed row indices (an embedding's gradient): ``index_add_``;
    any other form goes to the scatter specializer registered before this one."""
    from torchneuron.compiler.interpreter._ops_reduce import simple_body

    fallback = None if _SCATTER_BEFORE is None else _SCATTER_BEFORE(op)
    if len(op.operands) != 3 or simple_body(op) != "stablehlo.add":
        return fallback
    dn = op.attributes["scatter_dimension_numbers"]
    x_t, idx_t, u_t = op.operand_types
    shape, r = tuple(x_t.shape), len(x_t.shape)
    if (
        r < 2 or not static(shape) or not static(idx_t.shape) or not static(u_t.shape)
        or dn.get("input_batching_dims") or dn.get("scatter_indices_batching_dims")
        or x_t.dtype == "i1" or x_t.dtype != u_t.dtype
        or list(dn["inserted_window_dims"]) != [0]
        or list(dn["scattered_dims_to_operand_dims"]) != [0]
    ):  # fmt: skip
        return fallback
    rows = _index_shape(tuple(idx_t.shape), int(dn["index_vector_dim"]), 1)
    nb = len(rows) if rows is not None else -1
    if (
        rows is None or list(dn["update_window_dims"]) != list(range(nb, nb + r - 1))
        or tuple(u_t.shape) != (*rows, *shape[1:])
    ):  # fmt: skip
        return fallback
    n_rows, flat_u = shape[0], (-1, *shape[1:])

    def add_rows(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x, idx, u = args
        i = idx.reshape(-1).to(torch.int64)
        u = u.reshape(flat_u)
        out = x.clone()
        if i.numel() and not (int(i.min()) >= 0 and int(i.max()) < n_rows):
            ok = (i >= 0) & (i < n_rows)  # out-of-range rows are dropped
            i, u = i[ok], u[ok]
        return [out.index_add_(0, i, u)]

    return add_rows
