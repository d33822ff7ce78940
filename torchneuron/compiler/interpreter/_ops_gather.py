"""gather and scatter with the full StableHLO dimension numbers (incl. batching dims).

Both turn the dimension numbers into one integer index tensor per operand dimension,
then use torch advanced indexing (gather) or flat index_add/scatter_reduce (scatter).
A scatter body other than add/replace/max/min/multiply runs element by element
through the interpreter, in update order.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter._ops_reduce import simple_body
from torchneuron.compiler.interpreter._registry import Runner, ints, register
from torchneuron.compiler.stablehlo.ir import Operation


def _index_rows(indices: torch.Tensor, ivd: int) -> torch.Tensor:
    """Indices with the index vector as the last dimension, as int64."""
    idx = indices.to(torch.int64)
    return idx.unsqueeze(-1) if ivd == idx.dim() else idx.movedim(ivd, -1)


def _batch_pos(idim: int, ivd: int) -> int:
    """Position of start-indices dim ``idim`` once the index vector dim is removed."""
    return idim if idim < ivd else idim - 1


@register("stablehlo.gather")
def gather(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    operand, indices = args
    dn = op.attributes["dimension_numbers"]
    ivd = int(dn["index_vector_dim"])
    offset_dims = list(dn["offset_dims"])
    collapsed = list(dn["collapsed_slice_dims"])
    obatch = list(dn.get("operand_batching_dims", []))
    ibatch = list(dn.get("start_indices_batching_dims", []))
    sizes = ints(op, "slice_sizes")
    idx = _index_rows(indices, ivd)
    batch_shape = list(idx.shape[:-1])
    nb, r = len(batch_shape), operand.dim()
    zero = torch.zeros(batch_shape, dtype=torch.int64)
    starts = [zero] * r
    for k, d in enumerate(dn["start_index_map"]):
        starts[d] = idx[..., k].clamp(0, max(operand.shape[d] - sizes[d], 0))
    for od, idim in zip(obatch, ibatch, strict=False):
        pos = _batch_pos(idim, ivd)
        view = [1] * nb
        view[pos] = batch_shape[pos]
        starts[od] = torch.arange(batch_shape[pos]).reshape(view).expand(batch_shape)
    off_dims = [d for d in range(r) if d not in collapsed and d not in obatch]
    no = len(off_dims)
    index = []
    for d in range(r):
        s = starts[d].reshape(batch_shape + [1] * no)
        if d in off_dims:
            view = [1] * (nb + no)
            view[nb + off_dims.index(d)] = sizes[d]
            s = s + torch.arange(sizes[d]).reshape(view)
        index.append(s)
    res = operand[tuple(index)] if r else operand.expand(batch_shape)
    res = res.reshape(batch_shape + [sizes[d] for d in off_dims])
    out_rank = nb + no
    batch_out = [i for i in range(out_rank) if i not in offset_dims]
    perm = [
        nb + offset_dims.index(i) if i in offset_dims else batch_out.index(i)
        for i in range(out_rank)
    ]
    return [res.permute(perm)]


def is_replace(op: Operation, n: int) -> bool:
    """Body ``^(cur..., upd...): return upd...`` (index_put without accumulate)."""
    body, params = op.regions[0], op.region_args[0]
    return (
        len(body) == 1
        and body[0].name == "stablehlo.return"
        and body[0].operands == [p for p, _ in params[n:]]
    )


# torch's CPU index_put_ runs its loop in parallel chunks from this many elements on
# (ATen's GRAIN_SIZE); below it the loop is serial and the last duplicate wins
_SERIAL_PUT = 32768


def put_last_wins(flat: torch.Tensor, linear: torch.Tensor, updates: torch.Tensor) -> None:
    """``flat[linear] = updates`` with the last of duplicate positions winning, as in
    eager's scatter (the last index along ``dim``, which is the last in the updates'
    row-major order however the lowering permuted them). torch's ``index_put_`` leaves
    duplicates undefined, and from 32768 elements its threads wrote them in any order:
    a (300, 400) scatter along dim 1 of transposed updates differed from eager."""
    linear, updates = linear.reshape(-1), updates.reshape(-1)
    if linear.numel() >= _SERIAL_PUT:
        order = torch.arange(linear.numel())
        last = torch.full((flat.numel(),), -1, dtype=torch.int64)
        last.scatter_reduce_(0, linear, order, reduce="amax")
        keep = last[linear] == order
        linear, updates = linear[keep], updates[keep]
    flat.index_put_((linear,), updates)


_REDUCE = {"stablehlo.maximum": "amax", "stablehlo.minimum": "amin", "stablehlo.multiply": "prod"}


@register("stablehlo.scatter")
def scatter(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    n = (len(args) - 1) // 2
    inputs, indices, updates = list(args[:n]), args[n], list(args[n + 1 :])
    dn = op.attributes["scatter_dimension_numbers"]
    ivd = int(dn["index_vector_dim"])
    uwd = list(dn["update_window_dims"])
    inserted = list(dn["inserted_window_dims"])
    obatch = list(dn.get("input_batching_dims", []))
    ibatch = list(dn.get("scatter_indices_batching_dims", []))
    to_operand = list(dn["scattered_dims_to_operand_dims"])
    idx = _index_rows(indices, ivd)
    ushape = list(updates[0].shape)
    nu, r = len(ushape), inputs[0].dim()
    scatter_dims = [d for d in range(nu) if d not in uwd]

    def place(t: torch.Tensor) -> torch.Tensor:
        """A tensor over the index batch dims, viewed along the update's scatter dims."""
        view = [1] * nu
        for j, d in enumerate(scatter_dims):
            view[d] = t.shape[j]
        return t.reshape(view)

    full = [torch.zeros([1] * nu, dtype=torch.int64) for _ in range(r)]
    for k, d in enumerate(to_operand):
        full[d] = place(idx[..., k])
    batch_shape = list(idx.shape[:-1])
    for od, idim in zip(obatch, ibatch, strict=False):
        pos = _batch_pos(idim, ivd)
        view = [1] * len(batch_shape)
        view[pos] = batch_shape[pos]
        full[od] = place(torch.arange(batch_shape[pos]).reshape(view).expand(batch_shape))
    window_operand = [d for d in range(r) if d not in inserted and d not in obatch]
    for j, d in enumerate(window_operand):
        view = [1] * nu
        view[uwd[j]] = ushape[uwd[j]]
        full[d] = full[d] + torch.arange(ushape[uwd[j]]).reshape(view)
    shape = list(inputs[0].shape)
    full = [f.expand(ushape) for f in full]
    ok = torch.ones(ushape, dtype=torch.bool)
    linear = torch.zeros(ushape, dtype=torch.int64)
    for d in range(r):
        ok &= (full[d] >= 0) & (full[d] < shape[d])
        linear = linear * shape[d] + full[d]
    lin = linear[ok]
    outs = [x.clone().reshape(-1) for x in inputs]
    vals = [u[ok] for u in updates]
    kind = simple_body(op)
    if n == 1 and is_replace(op, n):
        put_last_wins(outs[0], lin, vals[0])
    elif n == 1 and kind == "stablehlo.add" and outs[0].dtype != torch.bool:
        outs[0].index_add_(0, lin, vals[0])
    elif n == 1 and kind in _REDUCE and outs[0].dtype != torch.bool:
        outs[0].scatter_reduce_(0, lin, vals[0], reduce=_REDUCE[kind], include_self=True)
    else:
        for j in range(lin.numel()):
            k = int(lin[j])
            res = run.region(op, 0, [o[k] for o in outs] + [v[j] for v in vals])
            for o, x in zip(outs, res, strict=False):
                o[k] = x
    return [o.reshape(shape) for o in outs]
