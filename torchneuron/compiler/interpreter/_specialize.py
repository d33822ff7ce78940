"""Load-time specializations of StableHLO ops: each op's attributes read once.

Why: an executable runs the same program every training step, and the generic op
implementations (``OPS``) re-read their attributes (dimension numbers, permutations,
result types) and re-derive everything static on every call. A *specializer* looks at
one ``Operation`` when the program is prepared and returns a callable with all of that
already resolved, or None when the op's form is not one it handles (the generic
implementation runs then). Specialized callables compute exactly what the generic
ones compute, bit for bit: the same torch calls on the same values, minus the parsing.

Some specializations also replace a slow generic strategy by one torch call for a
form the lowering produces often: max-pooling's "max with its first index" reduce
(a two-result reduce whose body is compare/select/minimum, otherwise run as a tree of
interpreted body evaluations), a scatter-add of whole elements (max-pool backward),
and a convolution whose padding torch's conv can take itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from torchneuron.compiler.interpreter._registry import OpFn, Runner, ints, static
from torchneuron.compiler.stablehlo._dtypes import TORCH_DTYPES
from torchneuron.compiler.stablehlo.ir import Operation

_IS_INFERENCE = torch.Tensor.is_inference

__all__ = ["SPECIALIZERS", "specialize", "specializer"]

Specializer = Callable[[Operation], OpFn | None]
SPECIALIZERS: dict[str, Specializer] = {}


def specializer(*names: str) -> Callable[[Specializer], Specializer]:
    """Register ``fn(op) -> OpFn | None`` as the load-time specializer of ``names``."""

    def deco(fn: Specializer) -> Specializer:
        for n in names:
            SPECIALIZERS[n] = fn
        return fn

    return deco


def specialize(op: Operation, generic: OpFn) -> OpFn:
    """The callable to run ``op`` with: a specialized one if a specializer takes it."""
    spec = SPECIALIZERS.get(op.name)
    if spec is None:
        return generic
    fast = spec(op)
    return generic if fast is None else fast



def _dtype(op: Operation, i: int = 0) -> torch.dtype | None:
    return TORCH_DTYPES.get(op.result_types[i].dtype)


# --- shape ops: every attribute is static -------------------------------------------------


@specializer("stablehlo.reshape")
def _reshape(op: Operation) -> OpFn | None:
    if len(op.operands) != 1 or not static(op.result_types[0].shape):
        return None
    shape = tuple(op.result_types[0].shape)

    def reshape(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        return [args[0].reshape(shape)]

    reshape.reshape_to = shape  # type: ignore[attr-defined]  # (``_codegen`` inlines the call)
    return reshape


@specializer("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(op: Operation) -> OpFn | None:
    if len(op.operands) != 1:
        return None
    in_shape, shape = op.operand_types[0].shape, op.result_types[0].shape
    if not (static(in_shape) and static(shape)):
        return None
    dims = ints(op, "broadcast_dimensions")
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    permute = order != list(range(len(dims)))
    view = [1] * len(shape)
    for i in order:
        view[dims[i]] = in_shape[i]
    view_t, shape_t = tuple(view), tuple(shape)

    def broadcast_in_dim(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x = args[0]
        if permute:
            x = x.permute(order)
        return [x.reshape(view_t).expand(shape_t)]

    return broadcast_in_dim


@specializer("stablehlo.transpose")
def _transpose(op: Operation) -> OpFn | None:
    perm = ints(op, "permutation")

    def transpose(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        return [args[0].permute(perm)]

    return transpose


@specializer("stablehlo.slice")
def _slice(op: Operation) -> OpFn | None:
    start, limit = ints(op, "start_indices"), ints(op, "limit_indices")
    strides = ints(op, "strides", [1] * len(start))
    index = tuple(slice(s, e, st) for s, e, st in zip(start, limit, strides, strict=False))

    def slice_(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        return [args[0][index]]

    return slice_


@specializer("stablehlo.convert")
def _convert(op: Operation) -> OpFn | None:
    dt, src = _dtype(op), TORCH_DTYPES.get(op.operand_types[0].dtype)
    if dt is None or src is None:
        return None
    if src == dt:
        return lambda op, args, run: [args[0]]
    # float <-> float and int/bool -> float are a plain ``to`` in the generic path too
    if dt.is_floating_point and not src.is_complex:
        return lambda op, args, run: [args[0].to(dt)]
    if dt == torch.bool and not src.is_complex:
        # the generic ``x != 0``, as a cast: C++'s bool conversion is ``x != 0`` (NaN is
        # true, -0 false), measured equal on every special value, 7x faster (4096 floats:
        # 1.7 µs against 12.6 µs; dropout's saved mask takes this convert)
        return lambda op, args, run: [args[0].to(torch.bool)]
    return None


# --- reductions ----------------------------------------------------------------------------


@specializer("stablehlo.reduce")
def _reduce(op: Operation) -> OpFn | None:
    from torchneuron.compiler.interpreter._ops_reduce import simple_body

    dims = ints(op, "dimensions")
    n = len(op.operands) // 2
    kind = simple_body(op)
    out_t = TORCH_DTYPES.get(op.result_types[0].dtype) if op.result_types else None
    if (
        kind == "stablehlo.add" and n == 1 and dims and out_t is not None
        and out_t.is_floating_point
        and all(TORCH_DTYPES.get(t.dtype) == out_t for t in op.operand_types)
    ):  # fmt: skip
        # a float sum (the most common reduce): the generic path's ``sum`` then the
        # init added, without its dispatch on kind and dtype, the add in place
        def float_sum(op: Operation, args: list[Any], run: Runner) -> list[Any]:
            x, init = args
            if x.dtype != out_t or init.dtype != out_t:
                return reduce_generic(op, args, run)
            return [torch.sum(x, dim=dims, dtype=out_t).add_(init)]

        reduce_generic = _simple(kind, dims)
        return float_sum
    if kind is not None and n == 1:
        return _simple(kind, dims)
    if n == 2 and _is_max_with_first_index(op):
        return _max_with_index(dims)
    return None


def _simple(kind: str, dims: list[int]) -> OpFn:
    """A reduce with a one-op body: torch's reduction, then the init combined."""
    from torchneuron.compiler.interpreter._ops_reduce import _COMBINE, _fast_reduce, reduce_tensors

    combine = _COMBINE[kind]

    def simple(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x, init = args
        r = _fast_reduce(kind, x, dims)
        if r is None:
            return reduce_tensors(op, [x], [init], dims, run)
        # (``to`` a tensor's own dtype returns it: asked only when it would convert)
        out = combine(r, init if init.dtype is r.dtype else init.to(r.dtype))
        return [out if out.dtype is x.dtype else out.to(x.dtype)]

    return simple


def _is_max_with_first_index(op: Operation) -> bool:
    """Body ``(a, ai, b, bi) -> (a >= b ? a : b, a == b ? min(ai, bi) : (a >= b ? ai : bi))``,
    the reduce max-pooling with indices lowers to."""
    if len(op.regions) != 1 or len(op.region_args[0]) != 4:
        return False
    a, ai, b, bi = (p for p, _ in op.region_args[0])
    body = op.regions[0]
    if [o.name for o in body] != [
        "stablehlo.compare", "stablehlo.select", "stablehlo.compare", "stablehlo.minimum",
        "stablehlo.select", "stablehlo.select", "stablehlo.return",
    ]:  # fmt: skip
        return False
    ge, sel_v, eq, mn, sel_i, pick, ret = body
    types_ok = ge.attributes.get("compare_type") in ("FLOAT", "SIGNED") and eq.attributes.get(
        "compare_type"
    ) == ge.attributes.get("compare_type")
    return (
        types_ok
        and ge.attributes.get("comparison_direction") == "GE" and ge.operands == [a, b]
        and sel_v.operands == [ge.results[0], a, b]
        and eq.attributes.get("comparison_direction") == "EQ" and eq.operands == [a, b]
        and sorted(mn.operands) == sorted([ai, bi])
        and sel_i.operands == [ge.results[0], ai, bi]
        and pick.operands == [eq.results[0], mn.results[0], sel_i.results[0]]
        and ret.operands == [sel_v.results[0], pick.results[0]]
        and op.operand_types[1].dtype in ("i32", "i64", "si32", "si64")
    )  # fmt: skip


def _max_with_index(dims: list[int]) -> OpFn:
    """The max-with-first-index reduce in a few torch calls, same bits as the tree.

    Per output element the tree keeps, for values that are not NaN, the leftmost
    element comparing equal to the maximum (``a >= b`` picks ``a``) and the smallest
    index among those equal elements; then it applies the body once more with the init
    values as ``a``. Windows holding a NaN (whose result depends on the pairing order)
    or an empty reduction run the generic tree instead.
    """
    from torchneuron.compiler.interpreter._ops_reduce import reduce_tensors

    # the index operand is usually the same constant iota every run: whether it
    # increases along each window is worked out once per tensor
    increasing: list[Any] = [None, -1, False]  # [index tensor, its version, increases]

    def max_with_index(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x, ix, init, init_i = args
        keep = [d for d in range(x.dim()) if d not in dims]
        out_shape = [x.shape[d] for d in keep]
        width = 1
        for d in dims:
            width *= x.shape[d]
        k = 1
        for s in out_shape:
            k *= s
        if width == 0 or x.dtype.is_complex or x.dtype == torch.bool:
            return reduce_tensors(op, [x, ix], [init, init_i], dims, run)
        order = keep + list(dims)
        cols = x.permute(order).reshape(k, width)
        m, pos = cols.max(1, keepdim=True)  # torch returns the first maximal index
        if x.dtype.is_floating_point and bool(torch.isnan(m).any()):
            return reduce_tensors(op, [x, ix], [init, init_i], dims, run)
        v = cols.gather(1, pos).reshape(k)  # that element's own bits (-0.0 vs 0.0)
        icols = ix.permute(order).reshape(k, width)
        # an inference tensor (made under ``torch.inference_mode()``) has no version
        # counter, and may be written in place there unseen: it is looked at every run
        version = -1 if _IS_INFERENCE(ix) else ix._version
        if increasing[0] is not ix or version < 0 or increasing[1] != version:
            increasing[:] = [ix, version,
                             width < 2 or bool((icols[:, 1:] > icols[:, :-1]).all())]
        if increasing[2]:  # the first maximum holds the smallest index of the ties
            i = icols.gather(1, pos).reshape(k)
        else:  # smallest index among the elements equal to the maximum (int amin is slow)
            big = torch.iinfo(icols.dtype).max
            i = torch.where(cols == m, icols, big).min(1).values
        # the body once more, with the init values on the left
        if bool((v > init).all()):  # init loses everywhere (max-pooling's -inf)
            return [v.reshape(out_shape), i.reshape(out_shape)]
        a, ai = init.reshape(1).expand(k), init_i.reshape(1).expand(k)
        ge, same = a >= v, a == v
        rv = torch.where(ge, a, v)
        ri = torch.where(same, torch.minimum(ai, i), torch.where(ge, ai, i))
        return [rv.reshape(out_shape), ri.reshape(out_shape)]

    return max_with_index


# --- scatter: whole elements added at computed positions ----------------------------------


@specializer("stablehlo.scatter")
def _scatter(op: Operation) -> OpFn | None:
    """``scatter`` with one operand, scalar updates (no window dims), the index vector
    last, every operand dim indexed in order and an add body: a flat ``index_add_``;
    with a body returning the update (cross-entropy's gradient), the generic path's
    ``index_put_`` on the same flat positions in the same order."""
    from torchneuron.compiler.interpreter._ops_gather import is_replace, put_last_wins
    from torchneuron.compiler.interpreter._ops_reduce import simple_body

    if len(op.operands) != 3:
        return None
    replace = is_replace(op, 1)
    if not replace and simple_body(op) != "stablehlo.add":
        return None
    dn = op.attributes["scatter_dimension_numbers"]
    shape = op.operand_types[0].shape
    r = len(shape)
    idx_t = op.operand_types[1]
    if (
        not static(shape) or not static(idx_t.shape)
        or list(dn.get("update_window_dims", [])) or dn.get("input_batching_dims")
        or list(dn["inserted_window_dims"]) != list(range(r))
        or list(dn["scattered_dims_to_operand_dims"]) != list(range(r))
        or int(dn["index_vector_dim"]) != len(idx_t.shape) - 1
        or idx_t.shape[-1] != r or op.operand_types[0].dtype == "i1"
    ):  # fmt: skip
        return None
    strides = []
    acc = 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    strides.reverse()
    bounds = torch.tensor(shape, dtype=torch.int64)
    lows = torch.zeros(r, dtype=torch.int64)
    highs = bounds - 1
    weights = torch.tensor(strides, dtype=torch.int64)

    def element_scatter(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x, indices, updates = args
        idx = indices if indices.dtype is torch.int64 else indices.to(torch.int64)
        if torch.equal(idx.clamp(lows, highs), idx):  # the usual case: every index in range
            # (the flat positions by ``matmul``: integer products, exact in any order;
            # the same positions in the same order as below, without the reshapes)
            out = x.clone(memory_format=torch.contiguous_format)
            flat, linear = out.view(-1), idx @ weights
            if replace:
                put_last_wins(flat, linear, updates)
            else:
                flat.index_add_(0, linear.reshape(-1), updates.reshape(-1))
            return [out]
        ok = ((idx >= 0) & (idx < bounds)).all(-1)
        linear = (idx * weights).sum(-1)
        out = x.clone().reshape(-1)
        if bool(ok.all()):
            linear, updates = linear.reshape(-1), updates.reshape(-1)
        else:
            linear, updates = linear[ok], updates[ok]
        if replace:
            put_last_wins(out, linear, updates)
        else:
            out.index_add_(0, linear, updates)
        return [out.reshape(shape)]

    return element_scatter


# --- convolution ---------------------------------------------------------------------------

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@specializer("stablehlo.convolution")
def _convolution(op: Operation) -> OpFn | None:
    """A float convolution with non-negative padding and no lhs dilation, window reversal
    or batch groups: torch's conv pads by itself (as eager's conv does), no padded copy."""
    from torchneuron.compiler.interpreter._ops_conv import convolution

    dn = op.attributes["dimension_numbers"]
    sp_in = list(dn["input_spatial_dimensions"])
    ns = len(sp_in)
    conv = _CONV.get(ns)
    out = _dtype(op)
    lhs_t, rhs_t = (TORCH_DTYPES.get(t.dtype) for t in op.operand_types)
    if conv is None or out is None or not out.is_floating_point or lhs_t != out or rhs_t != out:
        return None
    padding = ints(op, "padding", [0] * (2 * ns))
    low, high = padding[0::2], padding[1::2]
    if (
        low != high or any(p < 0 for p in low)
        or any(d != 1 for d in ints(op, "lhs_dilation", [1] * ns))
        or any(op.attributes.get("window_reversal") or [False] * ns)
        or int(op.attributes.get("batch_group_count", 1)) != 1
    ):  # fmt: skip
        return None
    strides = ints(op, "window_strides", [1] * ns)
    rhs_dil = ints(op, "rhs_dilation", [1] * ns)
    fgc = int(op.attributes.get("feature_group_count", 1))
    x_perm = [dn["input_batch_dimension"], dn["input_feature_dimension"]] + sp_in
    w_perm = [dn["kernel_output_feature_dimension"], dn["kernel_input_feature_dimension"]]
    w_perm += list(dn["kernel_spatial_dimensions"])
    order = [dn["output_batch_dimension"], dn["output_feature_dimension"]]
    order += list(dn["output_spatial_dimensions"])
    y_perm = [order.index(d) for d in range(len(order))]
    ident = list(range(ns + 2))

    def conv_padded(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        lhs, rhs = args
        if lhs.dtype != out or rhs.dtype != out:
            return convolution(op, args, run)
        x = lhs if x_perm == ident else lhs.permute(x_perm)
        w = rhs if w_perm == ident else rhs.permute(w_perm)
        y = conv(x, w, stride=strides, padding=low, dilation=rhs_dil, groups=fgc)
        return [y if y_perm == ident else y.permute(y_perm)]

    return conv_padded
