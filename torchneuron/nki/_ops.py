"""The instructions both ``nki.language`` and ``nki.isa`` are made of, with their rules.

Why shared: ``nl.add(x, y)`` and ``nisa.tensor_tensor(x, y, op=nl.add)`` are the same
VectorE instruction; ``nl.matmul`` is ``nisa.nc_matmul`` (plus a transpose when the
left operand is not already laid out with the contraction on partitions). Each helper
checks the hardware's rules, computes the values on the CPU, and appends one
instruction to the running kernel.

Numbers: engines compute in fp32 and round to the output dtype; TensorE multiplies its
inputs as given and accumulates in fp32 in PSUM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ._context import current
from ._dtypes import check_engine_dtype, cost_dtype
from .errors import NKIError
from .tensor import NkiTensor, new_tensor, tile_values

__all__ = ["dma", "elementwise", "matmul", "reduce", "transpose", "write", "accumulate"]


def on_chip(api: str, *xs: Any) -> None:
    """Compute engines read SBUF or PSUM: an HBM operand must be loaded first."""
    for i, x in enumerate(xs):
        if isinstance(x, NkiTensor) and x.buffer == "hbm":
            raise NKIError(api, "compute engines read SBUF or PSUM, never HBM",
                           f"operand {i} {x!r} is in HBM",
                           "Load it into SBUF first with nl.load (or nisa.dma_copy)")


def _free(shape: Sequence[int]) -> int:
    n = 1
    for s in shape[1:]:
        n *= s
    return n


def _out_dtype(xs: Sequence[Any], dtype: Any) -> torch.dtype:
    if dtype is not None:
        from ._dtypes import as_dtype

        return as_dtype(dtype)
    ds = [x.dtype for x in xs if isinstance(x, NkiTensor)]
    if not ds:
        return torch.float32
    out = ds[0]
    for d in ds[1:]:
        out = torch.promote_types(out, d)
    if out in (torch.float8_e4m3fn, torch.float8_e5m2):
        out = torch.bfloat16  # engines do not write fp8 unless asked (nisa.tensor_copy)
    return out


def _partitions_match(api: str, xs: Sequence[Any]) -> None:
    tiles = [x for x in xs if isinstance(x, NkiTensor) and x.ndim >= 1]
    parts = {x.shape[0] for x in tiles}
    if len(parts) > 1:
        raise NKIError(api, "operands of one instruction share the partition dimension",
                       f"partition sizes {sorted(parts)} in one instruction",
                       "Engines broadcast along the free axes only; load a row into every "
                       "partition with nl.load(w.broadcast_to((128, n)))")


def _fp32(x: Any) -> Any:
    v = tile_values(x)
    if isinstance(v, torch.Tensor):
        return v.float() if v.dtype.is_floating_point or v.dtype == torch.bool else v.to(torch.float32)
    return v


def _apply_mask(out: torch.Tensor, mask: Any) -> torch.Tensor:
    if mask is None:
        return out
    m = torch.as_tensor(np.asarray(mask)) if not isinstance(mask, torch.Tensor) else mask
    return torch.where(m.to(torch.bool), out, torch.zeros((), dtype=out.dtype))


def elementwise(api: str, engine: str, fn: Callable[..., torch.Tensor], xs: Sequence[Any],
                dtype: Any = None, mask: Any = None, buffer: str = "sbuf") -> NkiTensor:
    """One Vector/Scalar/GpSimd instruction computing ``fn`` over its operands (fp32 inside)."""
    on_chip(api, *xs)
    tiles = [x for x in xs if isinstance(x, NkiTensor)]
    check_engine_dtype(api, engine, *(x.dtype for x in tiles))
    _partitions_match(api, xs)
    out_dtype = _out_dtype(xs, dtype)
    vals = torch.broadcast_tensors(*[torch.as_tensor(_fp32(x)) for x in xs]) if len(xs) > 1 \
        else [torch.as_tensor(_fp32(xs[0]))]
    res = _apply_mask(fn(*vals), mask).to(out_dtype)
    out = new_tensor(res.contiguous(), buffer, api)
    ctx = current(api)
    free = _free(out.shape) * max(1, len(tiles))
    out.producer = ctx.emit(api, engine, tiles, [out], elems=free)
    return out


def reduce(api: str, fn: Callable[..., torch.Tensor], x: NkiTensor, axis: Any,
           keepdims: bool, dtype: Any = None, engine: str = "vector") -> NkiTensor:
    """A reduction along free axes (VectorE); the partition axis is refused."""
    on_chip(api, x)
    check_engine_dtype(api, engine, x.dtype)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % x.ndim for a in axes)
    if 0 in axes:
        raise NKIError(api, "reductions run along the free axes (axis >= 1)",
                       f"axis {axis} includes the partition axis 0",
                       "Transpose first (nl.transpose / nisa.nc_transpose), or reduce across "
                       "partitions with a matmul against a ones vector")
    res = fn(_fp32(x), dim=axes, keepdim=keepdims).to(_out_dtype([x], dtype))
    out = new_tensor(res.contiguous(), "sbuf", api)
    out.producer = current(api).emit(api, engine, [x], [out], elems=_free(x.shape))
    return out


def _tensor_operand(api: str, role: str, x: NkiTensor) -> None:
    if not isinstance(x, NkiTensor):
        raise TypeError(f"{api}: {role} must be a tile, got {type(x).__name__}")
    on_chip(api, x)
    if x.buffer != "sbuf":
        raise NKIError(api, "TensorE reads its operands from SBUF",
                       f"the {role} operand is in {x.buffer.upper()}",
                       "Copy it to SBUF first (nl.copy / nisa.tensor_copy)")
    check_engine_dtype(api, "tensor", x.dtype)
    if x.ndim != 2:
        raise NKIError(api, "matmul operands are 2-D tiles [partition, free]",
                       f"the {role} operand has shape {x.shape}", "Reshape or slice it")


def matmul(api: str, stationary: NkiTensor, moving: NkiTensor,
           values: Callable[[], torch.Tensor] | None = None, dtype_name: str | None = None
           ) -> NkiTensor:
    """``stationary.T @ moving`` on TensorE into a new fp32 PSUM tile, with the tile limits.

    ``values``: the fp32 product when the operands are not plain numbers (MX scales).
    """
    _tensor_operand(api, "stationary", stationary)
    _tensor_operand(api, "moving", moving)
    p = current(api).profile
    k, m = stationary.shape
    k2, n = moving.shape
    if k != k2:
        raise NKIError(api, "stationary and moving share the contraction (partition) dimension",
                       f"stationary {stationary.shape} and moving {moving.shape}",
                       "Both operands need the contraction dimension on partitions")
    if k > p.pe_rows:
        raise NKIError(api, f"contraction (partition) size <= {p.pe_rows}",
                       f"the operands have {k} partitions",
                       "Accumulate several matmuls over 128-row chunks into one PSUM tile")
    if m > p.pe_cols:
        raise NKIError(api, f"stationary free size <= {p.pe_cols} (a {p.pe_rows}x{p.pe_cols} "
                       "stationary tile)", f"stationary {stationary.shape} has free size {m}",
                       "Tile the output rows in chunks of nl.tile_size.gemm_stationary_fmax")
    if n > p.psum_bank_fp32_cols:
        raise NKIError(api, f"moving free size <= {p.psum_bank_fp32_cols} (one PSUM bank of "
                       "fp32 accumulators)", f"moving {moving.shape} has free size {n}",
                       "Tile the output columns in chunks of nl.tile_size.gemm_moving_fmax")
    if values is None:
        res = stationary.data.float().T @ moving.data.float()
    else:
        res = values()
    out = new_tensor(res.contiguous(), "psum", api)
    if dtype_name is None:
        dtype_name = cost_dtype(torch.promote_types(stationary.dtype, moving.dtype))
    out.producer = current(api).emit(api, "tensor", [stationary, moving], [out],
                                     m=m, k=k, n=n, dtype=dtype_name)
    return out


def transpose(api: str, x: NkiTensor, buffer: str = "psum", dtype: Any = None) -> NkiTensor:
    """``x.T`` on TensorE (a matmul against the identity): partitions <-> free, both <= 128."""
    on_chip(api, x)
    check_engine_dtype(api, "tensor", x.dtype)
    p = current(api).profile
    if x.ndim != 2 or x.shape[1] > p.pe_cols:
        raise NKIError(api, f"a TensorE transpose takes a 2-D tile with free size <= {p.pe_cols}",
                       f"the tile has shape {x.shape}", "Transpose 128x128 blocks one at a time")
    out_dtype = torch.float32 if buffer == "psum" else _out_dtype([x], dtype)
    out = new_tensor(x.data.T.to(out_dtype).contiguous(), buffer, api)
    out.producer = current(api).emit(api, "tensor", [x], [out], m=x.shape[1], k=x.shape[0],
                                     n=x.shape[0], dtype=cost_dtype(x.dtype))
    return out


def dma(api: str, dst: NkiTensor, src: NkiTensor, mask: Any = None) -> None:
    """Copy ``src`` into ``dst`` on a DMA queue (HBM <-> SBUF, or on-chip)."""
    for role, t in (("source", src), ("destination", dst)):
        if not isinstance(t, NkiTensor):
            raise TypeError(f"{api}: the {role} must be an NKI tensor, got {type(t).__name__}")
    if src.shape != dst.shape and torch.Size(src.shape).numel() != torch.Size(dst.shape).numel():
        raise NKIError(api, "a DMA copies equal shapes", f"source {src.shape}, destination "
                       f"{dst.shape}", "Slice both sides to the same tile shape")
    check_engine_dtype(api, "dma", src.dtype, dst.dtype)
    vals = src.data.reshape(dst.shape) if src.shape != dst.shape else src.data
    if mask is not None:
        vals = torch.where(torch.as_tensor(np.asarray(mask)).to(torch.bool), vals.to(dst.dtype),
                           dst.data)
    dst.assign(vals)
    nbytes = dst.data.numel() * dst.itemsize
    if mask is not None:
        nbytes = int(torch.as_tensor(np.asarray(mask)).expand(dst.shape).sum()) * dst.itemsize
    current(api).emit(api, "dma", [src], [dst], bytes=nbytes,
                      hbm=int(src.buffer == "hbm") + int(dst.buffer == "hbm"))


def write(target: NkiTensor, value: Any, api: str) -> None:
    """``target[...] = value``: a fresh result is written in place by its own instruction;
    anything else is one copy on VectorE (a scalar: a memset)."""
    if target.buffer == "hbm":
        raise NKIError(api, "HBM is written by DMA only",
                       f"assigning into {target!r}", "Use nl.store(dst, value=tile)")
    if isinstance(value, NkiTensor):
        if value.alloc is target.alloc and value.data.data_ptr() == target.data.data_ptr() \
                and value.shape == target.shape:
            return  # ``t[...] += x`` writes back its own view
        on_chip(api, value)
        target.assign(value.data)
        ins = value.producer
        if ins is not None and value._base is None and target.alloc.id not in ins.writes:
            ins.writes = (*ins.writes, target.alloc.id)
            return
        current(api).emit("nisa.tensor_copy", "vector", [value], [target],
                          elems=_free(target.shape))
        return
    target.assign(torch.as_tensor(tile_values(value)))
    current(api).emit("nisa.memset", "vector", [], [target], elems=_free(target.shape))


def accumulate(target: NkiTensor, value: Any) -> NkiTensor:
    """``target += value``: a matmul accumulates into its PSUM tile (fp32) for free; any
    other sum is a VectorE add."""
    api = "+= (accumulate)"
    on_chip(api, target, value)
    if target.buffer == "psum" and target.dtype != torch.float32:
        raise NKIError(api, "PSUM holds fp32 accumulators",
                       f"accumulating into a {target.dtype} PSUM tile",
                       "Allocate the accumulator with dtype=nl.float32")
    ins = value.producer if isinstance(value, NkiTensor) else None
    if target.buffer == "psum" and ins is not None and ins.engine == "tensor":
        target.assign(target.data + value.data)
        ins.reads = (*ins.reads, target.alloc.id)
        ins.writes = (*ins.writes, target.alloc.id)
        return target
    tiles = [target] + ([value] if isinstance(value, NkiTensor) else [])
    target.assign(torch.as_tensor(_fp32(target)) + torch.as_tensor(_fp32(value)))
    current(api).emit("nl.add", "vector", tiles, [target], elems=_free(target.shape) * 2)
    return target
