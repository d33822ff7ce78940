"""``nki.isa``: one function per NeuronCore instruction, as the public NKI 0.7 ISA names them.

Each function is exactly one instruction on one engine (TensorE ``nc_*``, VectorE
``tensor_*``, ScalarE ``activation``, GpSimd ``iota``, DMA ``dma_copy``), with the
hardware's rules checked by the shared helpers of ``_ops``. The MX pair
(``quantize_mx``, ``nc_matmul_mx``) exists on NeuronCore-v4 (trn3) only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from . import _ops
from ._context import current
from ._dtypes import as_dtype
from .errors import NKIError
from .tensor import NkiTensor, new_tensor

__all__ = [
    "activation", "dma_copy", "iota", "memset", "nc_matmul", "nc_matmul_mx", "nc_transpose",
    "quantize_mx", "tensor_copy", "tensor_reduce", "tensor_scalar", "tensor_tensor",
    "MX_BLOCK",
]

MX_BLOCK = 32  # elements sharing one E8M0 scale (OCP MX), along the contraction axis
_E4M3_EMAX = 8  # largest exponent of float8_e4m3fn (448 = 1.75 * 2**8)


def _torch_of(op: Any, api: str) -> Any:
    fn = getattr(op, "_torch", None)
    if fn is None:
        raise TypeError(f"{api}: op must be an nki.language function such as nl.add, got {op!r}")
    return fn


def nc_matmul(stationary: NkiTensor, moving: NkiTensor, **kwargs: Any) -> NkiTensor:
    """``stationary.T @ moving`` on TensorE into a new fp32 PSUM tile.

    Limits: contraction (partition) <= 128, stationary free <= 128, moving free <= 512.
    Accumulate with ``psum_tile[...] += nisa.nc_matmul(...)``.
    """
    return _ops.matmul("nisa.nc_matmul", stationary, moving)


def nc_transpose(data: NkiTensor, **kwargs: Any) -> NkiTensor:
    """``data.T`` on TensorE into a new fp32 PSUM tile (both sides <= 128)."""
    return _ops.transpose("nisa.nc_transpose", data, buffer="psum")


def tensor_tensor(data1: NkiTensor, data2: NkiTensor, op: Any, dtype: Any = None,
                  mask: Any = None) -> NkiTensor:
    """``op(data1, data2)`` elementwise on VectorE."""
    return _ops.elementwise("nisa.tensor_tensor", "vector", _torch_of(op, "nisa.tensor_tensor"),
                            [data1, data2], dtype, mask)


def tensor_scalar(data: NkiTensor, op0: Any, operand0: Any, reverse0: bool = False,
                  op1: Any = None, operand1: Any = None, reverse1: bool = False,
                  dtype: Any = None, mask: Any = None) -> NkiTensor:
    """``op1(op0(data, operand0), operand1)`` on VectorE; an operand is a scalar or a
    ``[P, 1]`` tile (one value per partition)."""
    f0 = _torch_of(op0, "nisa.tensor_scalar")
    f1 = _torch_of(op1, "nisa.tensor_scalar") if op1 is not None else None
    xs = [data, operand0] + ([operand1] if f1 is not None else [])

    def fn(d: torch.Tensor, a: torch.Tensor, *b: torch.Tensor) -> torch.Tensor:
        r = f0(a, d) if reverse0 else f0(d, a)
        if f1 is not None:
            r = f1(b[0], r) if reverse1 else f1(r, b[0])
        return r

    return _ops.elementwise("nisa.tensor_scalar", "vector", fn, xs, dtype, mask)


def tensor_reduce(op: Any, data: NkiTensor, axis: Any, negate: bool = False,
                  keepdims: bool = False, dtype: Any = None) -> NkiTensor:
    """Reduce ``data`` with ``op`` (nl.add / nl.maximum / nl.minimum / nl.multiply) along
    free axes on VectorE."""
    table = {"add": torch.sum, "maximum": torch.amax, "minimum": torch.amin}
    name = getattr(op, "__name__", "")
    if name not in table:
        raise TypeError(f"nisa.tensor_reduce: op must be nl.add, nl.maximum or nl.minimum, got {op!r}")
    base = table[name]

    def fn(v: torch.Tensor, dim: Any, keepdim: bool) -> torch.Tensor:
        r = base(v, dim=dim, keepdim=keepdim)
        return -r if negate else r

    return _ops.reduce("nisa.tensor_reduce", fn, data, axis, keepdims, dtype)


def activation(op: Any, data: NkiTensor, bias: Any = None, scale: Any = 1.0,
               dtype: Any = None, mask: Any = None) -> NkiTensor:
    """``op(data * scale + bias)`` on ScalarE; ``scale`` / ``bias`` are scalars or ``[P, 1]``
    tiles."""
    f = _torch_of(op, "nisa.activation")
    xs = [data, scale] + ([bias] if bias is not None else [])

    def fn(d: torch.Tensor, s: torch.Tensor, *b: torch.Tensor) -> torch.Tensor:
        return f(d * s + b[0]) if b else f(d * s)

    return _ops.elementwise("nisa.activation", "scalar", fn, xs, dtype or data.dtype, mask)


def tensor_copy(src: NkiTensor, dtype: Any = None, mask: Any = None, engine: str = "vector"
                ) -> NkiTensor:
    """A copy (with a cast to ``dtype``, fp8 included) into a new SBUF tile."""
    out_dtype = as_dtype(dtype) if dtype is not None else src.dtype
    fp8 = out_dtype == torch.float8_e4m3fn
    return _ops.elementwise("nisa.tensor_copy", engine,
                            (lambda a: a.clamp(-448, 448)) if fp8 else (lambda a: a),
                            [src], out_dtype, mask)


def memset(shape: Any, value: Any, dtype: Any, buffer: str = "sbuf") -> NkiTensor:
    """A new tile filled with ``value`` (VectorE)."""
    from . import language as nl

    return nl.full(shape, value, dtype, buffer)


def iota(expr: Any, dtype: Any) -> NkiTensor:
    """A tile holding the values of an index expression (``nl.arange`` arithmetic) (GpSimd)."""
    vals = torch.as_tensor(np.asarray(expr)).to(as_dtype(dtype))
    if vals.dim() == 1:
        vals = vals[:, None]
    out = new_tensor(vals.contiguous(), "sbuf", "nisa.iota")
    out.producer = current().emit("nisa.iota", "gpsimd", [], [out], elems=_ops._free(out.shape))
    return out


def dma_copy(dst: NkiTensor, src: NkiTensor, mask: Any = None) -> None:
    """Copy ``src`` into ``dst`` on a DMA queue (HBM <-> SBUF or on chip)."""
    _ops.dma("nisa.dma_copy", dst, src, mask)


# --- MX (microscaling) on NeuronCore-v4 -------------------------------------------------------------
def _require_mx(api: str) -> None:
    p = current(api).profile
    if p.core_version != "NeuronCore-v4":
        raise NKIError(api, "MX matmuls exist on NeuronCore-v4 (trn3) only",
                       f"the current hardware is {p.name} ({p.core_version})",
                       'Select trn3 with torchneuron.hardware.set_hardware("trn3")')


def quantize_mx(data: NkiTensor) -> tuple[NkiTensor, NkiTensor]:
    """Quantize ``data`` ([K, F], K a multiple of 32) to MXFP8 (E4M3) along the partition
    axis: returns the fp8 tile and its E8M0 scales ``[K/32, F]`` (uint8, bias 127)."""
    api = "nisa.quantize_mx"
    _require_mx(api)
    _ops.on_chip(api, data)
    k = data.shape[0]
    if data.ndim != 2 or k % MX_BLOCK:
        raise NKIError(api, f"MX groups {MX_BLOCK} elements along the partition axis",
                       f"a tile of shape {data.shape}", f"Use a multiple of {MX_BLOCK} partitions")
    q, e = mx_quantize(data.data.float())
    qt = new_tensor(q.contiguous(), "sbuf", api)
    st = new_tensor(e.contiguous(), "sbuf", api)
    ins = current(api).emit(api, "vector", [data], [qt, st], elems=_ops._free(data.shape) * 2)
    qt.producer = st.producer = ins
    return qt, st


def mx_quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """OCP MX quantization of ``x`` [K, F] in blocks of 32 along dim 0: the shared scale is
    ``2 ** (floor(log2(amax)) - emax(e4m3))``; elements are ``x / scale`` rounded to e4m3."""
    k, f = x.shape
    blocks = x.reshape(k // MX_BLOCK, MX_BLOCK, f)
    amax = blocks.abs().amax(dim=1)
    exp = torch.where(amax > 0, torch.floor(torch.log2(amax)), torch.zeros_like(amax)) - _E4M3_EMAX
    exp = exp.clamp(-127, 127)
    scale = torch.pow(2.0, exp)
    q = (blocks / scale[:, None, :]).clamp(-448, 448).to(torch.float8_e4m3fn).reshape(k, f)
    return q, (exp + 127).to(torch.uint8)


def mx_dequantize(q: torch.Tensor, e8m0: torch.Tensor) -> torch.Tensor:
    """The fp32 values an MX tile stands for."""
    k, f = q.shape
    scale = torch.pow(2.0, e8m0.float() - 127)
    return (q.float().reshape(k // MX_BLOCK, MX_BLOCK, f) * scale[:, None, :]).reshape(k, f)


def nc_matmul_mx(stationary: NkiTensor, moving: NkiTensor, stationary_scale: NkiTensor,
                 moving_scale: NkiTensor) -> NkiTensor:
    """MXFP8 ``stationary.T @ moving`` on TensorE at the MX rate (4x BF16 on trn3), each
    operand's 32-element groups along K scaled by its E8M0 scales; fp32 PSUM result."""
    api = "nisa.nc_matmul_mx"
    _require_mx(api)
    for role, t in (("stationary", stationary), ("moving", moving)):
        if t.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
            raise NKIError(api, "nc_matmul_mx multiplies MXFP8 operands",
                           f"the {role} operand has dtype {t.dtype}", "Quantize with nisa.quantize_mx")
    for role, t, s in (("stationary", stationary, stationary_scale),
                       ("moving", moving, moving_scale)):
        want = (t.shape[0] // MX_BLOCK, t.shape[1])
        if tuple(s.shape) != want:
            raise NKIError(api, f"one E8M0 scale per {MX_BLOCK} elements along K",
                           f"{role} {t.shape} with scales {s.shape}", f"Scales must be {want}")

    def values() -> torch.Tensor:
        a = mx_dequantize(stationary.data, stationary_scale.data)
        b = mx_dequantize(moving.data, moving_scale.data)
        return a.T @ b

    out = _ops.matmul(api, stationary, moving, values=values, dtype_name="f8E4M3FN")
    ins = out.producer
    ins.reads = tuple(sorted({*ins.reads, stationary_scale.alloc.id, moving_scale.alloc.id}))
    return out
