"""Data-movement StableHLO ops: constants, iota, broadcast, reshape, slices, pad, ...

Results may be torch views (broadcast_in_dim is an ``expand``); the interpreter
materializes outputs before handing them to the caller, and ops that write
(dynamic_update_slice) clone first.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import Runner, ints, out_dtype, out_shape, register
from torchneuron.compiler.stablehlo._dtypes import TORCH_DTYPES, dense_to_tensor
from torchneuron.compiler.stablehlo.ir import Operation


@register("stablehlo.constant", "arith.constant")
def constant(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    v = op.attributes["value"]
    if isinstance(v, dict) and v.get("_kind") == "dense":
        return [dense_to_tensor(v)]
    return [torch.tensor(v, dtype=out_dtype(op)).reshape(out_shape(op))]


def _iota(op: Operation, shape: list[int]) -> torch.Tensor:
    dim = int(op.attributes["iota_dimension"])
    dt = out_dtype(op)
    r = torch.arange(shape[dim], dtype=torch.int64 if not dt.is_floating_point else dt)
    view = [1] * len(shape)
    view[dim] = shape[dim]
    return r.to(dt).reshape(view).expand(shape)


@register("stablehlo.iota")
def iota(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return [_iota(op, out_shape(op))]


def _shape_operand(op: Operation, args: list[Any], i: int) -> list[int]:
    """A shape given as a tensor operand; static result types take precedence."""
    shape = out_shape(op)
    if all(s >= 0 for s in shape):
        return shape
    return [int(s) for s in args[i].reshape(-1).tolist()]


@register("stablehlo.dynamic_iota")
def dynamic_iota(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return [_iota(op, _shape_operand(op, args, 0))]


@register("stablehlo.broadcast_in_dim", "stablehlo.dynamic_broadcast_in_dim")
def broadcast_in_dim(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    x = args[0]
    dims = ints(op, "broadcast_dimensions")
    shape = _shape_operand(op, args, 1) if len(args) > 1 else out_shape(op)
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = x.permute(order) if order != list(range(len(dims))) else x
    view = [1] * len(shape)
    for i in order:
        view[dims[i]] = args[0].shape[i]
    return [x.reshape(view).expand(shape)]


@register("stablehlo.broadcast")
def broadcast(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    sizes = ints(op, "broadcast_sizes")
    x = args[0]
    return [x.reshape([1] * len(sizes) + list(x.shape)).expand(sizes + list(x.shape))]


@register("stablehlo.reshape", "stablehlo.dynamic_reshape", "tensor.cast", "tensor.reshape")
def reshape(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    shape = _shape_operand(op, args, 1) if len(args) > 1 else out_shape(op)
    return [args[0].reshape(shape)]


@register("stablehlo.transpose")
def transpose(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return [args[0].permute(ints(op, "permutation"))]


@register("stablehlo.slice")
def slice_(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    x = args[0]
    start, limit = ints(op, "start_indices"), ints(op, "limit_indices")
    strides = ints(op, "strides", [1] * len(start))
    return [x[tuple(slice(s, e, st) for s, e, st in zip(start, limit, strides, strict=False))]]


@register("stablehlo.real_dynamic_slice")
def real_dynamic_slice(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    x, start, limit, strides = args
    idx = tuple(
        slice(int(s), int(e), int(st))
        for s, e, st in zip(start.tolist(), limit.tolist(), strides.tolist(), strict=False)
    )
    return [x[idx]]


def _clamped_starts(x: torch.Tensor, starts: list[Any], sizes: list[int]) -> list[int]:
    """StableHLO clamps dynamic starts so the slice stays inside the operand."""
    return [
        max(0, min(int(s.reshape(()).item()), x.shape[d] - sizes[d])) for d, s in enumerate(starts)
    ]


@register("stablehlo.dynamic_slice")
def dynamic_slice(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    x, *starts = args
    sizes = ints(op, "slice_sizes")
    begin = _clamped_starts(x, starts, sizes)
    return [x[tuple(slice(b, b + n) for b, n in zip(begin, sizes, strict=False))]]


@register("stablehlo.dynamic_update_slice")
def dynamic_update_slice(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    x, upd, *starts = args
    sizes = list(upd.shape)
    begin = _clamped_starts(x, starts, sizes)
    out = x.clone()
    out[tuple(slice(b, b + n) for b, n in zip(begin, sizes, strict=False))] = upd
    return [out]


@register("stablehlo.concatenate")
def concatenate(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return [torch.cat(list(args), dim=int(op.attributes["dimension"]))]


def pad_tensor(
    x: torch.Tensor, value: torch.Tensor, low: list[int], high: list[int], interior: list[int]
) -> torch.Tensor:
    """StableHLO pad: interior padding between elements, then (possibly negative) edges."""
    if any(interior):
        shape = [
            (n - 1) * (i + 1) + 1 if n > 0 else 0 for n, i in zip(x.shape, interior, strict=False)
        ]
        spread = value.reshape(()).expand(shape).clone()
        spread[tuple(slice(None, None, i + 1) for i in interior)] = x
        x = spread
    crop = tuple(
        slice(max(0, -lo), n - max(0, -hi)) for n, lo, hi in zip(x.shape, low, high, strict=False)
    )
    x = x[crop]
    lo_pos = [max(0, lo) for lo in low]
    hi_pos = [max(0, hi) for hi in high]
    if not any(lo_pos) and not any(hi_pos):
        return x
    shape = [n + a + b for n, a, b in zip(x.shape, lo_pos, hi_pos, strict=False)]
    out = value.reshape(()).to(x.dtype).expand(shape).clone()
    out[tuple(slice(a, a + n) for a, n in zip(lo_pos, x.shape, strict=False))] = x
    return out


@register("stablehlo.pad")
def pad(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    x, value = args
    n = x.dim()
    low = ints(op, "edge_padding_low")
    high = ints(op, "edge_padding_high")
    interior = ints(op, "interior_padding", [0] * n)
    return [pad_tensor(x, value, low, high, interior)]


@register("stablehlo.reverse")
def reverse(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    dims = ints(op, "dimensions")
    return [torch.flip(args[0], dims) if dims else args[0]]


@register("stablehlo.get_dimension_size")
def get_dimension_size(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return [torch.tensor(args[0].shape[int(op.attributes["dimension"])], dtype=out_dtype(op))]


@register("stablehlo.optimization_barrier")
def optimization_barrier(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return list(args)


@register("stablehlo.tuple")
def tuple_(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return [tuple(args)]


@register("stablehlo.get_tuple_element")
def get_tuple_element(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return [args[0][int(op.attributes["index"])]]


@register("tensor.empty")
def tensor_empty(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return [torch.zeros(out_shape(op), dtype=out_dtype(op))]


@register("tensor.extract")
def tensor_extract(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    x, *idx = args
    return [x[tuple(int(i) for i in idx)]]


@register("tensor.from_elements")
def tensor_from_elements(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    return [torch.stack([a.reshape(()) for a in args]).reshape(out_shape(op)).to(out_dtype(op))]


@register("stablehlo.custom_call")
def custom_call(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    """A registered target (``custom_targets``) on the operands, as its config says."""
    from torchneuron.compiler.stablehlo.custom_targets import (
        call_target,
        lookup_target,
        record_call,
    )

    from ._registry import UnsupportedStableHLOOp

    name = str(op.attributes.get("call_target_name", "?"))
    target = lookup_target(name)
    if target is None:
        raise UnsupportedStableHLOOp(
            f"stablehlo.custom_call @{name}: no target of that name is registered in this "
            "process (an nki_op registers its target when it is defined: import the module "
            "defining it before running the program)", op=op.name)
    config = _config(str(op.attributes.get("backend_config") or "{}"))
    outs, ns, trace = call_target(target, config, list(args))
    if "plan" in config or ns or trace:  # (eager's own kernels are costed by neuronc)
        record_call(int(config.get("plan", {}).get("total_ns", ns)), ns, trace)
    return [_declared(o, t) for o, t in zip(outs, op.result_types, strict=True)]


def _declared(out: torch.Tensor, declared: Any) -> torch.Tensor:
    """``out`` in its declared dtype when that is a wider float (exact). PyTorch's fake
    ``_native_batch_norm_legit_functional`` gives a bfloat16 input's new running
    statistics in float32, its CPU kernel in bfloat16; the graph converts them back."""
    want = TORCH_DTYPES.get(declared.dtype)
    if want is None or out.dtype == want or not (out.dtype.is_floating_point
                                                 and want.is_floating_point) \
            or torch.finfo(want).bits <= torch.finfo(out.dtype).bits:
        return out
    return out.to(want)


@functools.lru_cache(maxsize=1024)
def _config(text: str) -> dict[str, Any]:
    """A custom call's ``backend_config`` (parsed once: a program calls it every step)."""
    import json

    return json.loads(text)
