"""``nki.language``: tiles, loads and stores, loops, and the high-level tile operations.

Follows the public NKI 0.7 ``nki.language`` API as a specification. Arithmetic and
comparisons run on VectorE, transcendental functions on ScalarE (its activation table),
reductions along the free axes on VectorE, ``matmul`` / ``transpose`` on TensorE with
the result in PSUM (fp32), ``load`` / ``store`` on the DMA queues. Every call computes
its values at once and appends one instruction to the running kernel (``_ops``).
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from . import _ops
from . import tensor as _tensor_module
from ._context import current
from ._dtypes import as_dtype
from .errors import NKIError
from .tensor import NkiTensor, new_tensor

# --- dtypes (torch dtypes: the interpreter computes with CPU tensors) -------------------
float32 = torch.float32
tfloat32 = torch.float32
bfloat16 = torch.bfloat16
float16 = torch.float16
float8_e4m3 = torch.float8_e4m3fn
float8_e5m2 = torch.float8_e5m2
int32 = torch.int32
int16 = torch.int16
int8 = torch.int8
uint8 = torch.uint8
bool_ = torch.bool

# --- buffers -----------------------------------------------------------------------------
sbuf = "sbuf"
psum = "psum"
hbm = "hbm"
shared_hbm = "hbm"
private_hbm = "hbm"

tile_size = SimpleNamespace(pmax=128, psum_fmax=512, gemm_stationary_fmax=128,
                            gemm_moving_fmax=512)


def par_dim(n: int) -> int:
    """Marks the partition dimension of a shape (the first one, here as in NKI)."""
    return n


# --- tensors -----------------------------------------------------------------------------
def _buffer(buffer: Any) -> str:
    if buffer not in ("sbuf", "psum", "hbm"):
        raise ValueError(f"unknown NKI buffer {buffer!r}: use nl.sbuf, nl.psum or nl.shared_hbm")
    return buffer


def ndarray(shape: Any, dtype: Any, buffer: Any = sbuf, name: str = "") -> NkiTensor:
    """A new tensor in ``buffer`` (values undefined: zeros here)."""
    return _alloc(shape, dtype, buffer, "nl.ndarray")


def _alloc(shape: Any, dtype: Any, buffer: Any, api: str) -> NkiTensor:
    shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
    dt = as_dtype(dtype)
    buf = _buffer(buffer)
    if buf == "psum" and dt != torch.float32:
        raise NKIError(api, "PSUM holds fp32 accumulators",
                       f"a PSUM tensor of dtype {dt}", "Use dtype=nl.float32 in PSUM")
    if buf == "hbm":
        # SPMD instances share their shared_hbm tensors: the n-th allocation of every
        # instance is the first instance's n-th
        ctx = current(api)
        n = ctx.hbm_seen
        ctx.hbm_seen += 1
        if n < len(ctx.hbm_shared):
            return ctx.hbm_shared[n]
        t = new_tensor(torch.zeros(shape, dtype=dt), buf, api)
        ctx.hbm_shared.append(t)
        return t
    return new_tensor(torch.zeros(shape, dtype=dt), buf, api)


def zeros(shape: Any, dtype: Any, buffer: Any = sbuf, name: str = "") -> NkiTensor:
    """A tile of zeros (one memset on VectorE for on-chip tiles)."""
    return full(shape, 0, dtype, buffer)


def ones(shape: Any, dtype: Any, buffer: Any = sbuf, name: str = "") -> NkiTensor:
    return full(shape, 1, dtype, buffer)


def full(shape: Any, fill_value: Any, dtype: Any, buffer: Any = sbuf, name: str = "") -> NkiTensor:
    t = _alloc(shape, dtype, buffer, "nl.full")
    t.data.fill_(fill_value)
    if t.buffer != "hbm":
        t.producer = current().emit("nisa.memset", "vector", [], [t], elems=_ops._free(t.shape))
    return t


def zeros_like(a: NkiTensor, dtype: Any = None, buffer: Any = None) -> NkiTensor:
    return zeros(a.shape, dtype or a.dtype, buffer or (a.buffer if a.buffer != "hbm" else sbuf))


def empty_like(a: NkiTensor, dtype: Any = None, buffer: Any = None) -> NkiTensor:
    return ndarray(a.shape, dtype or a.dtype, buffer or a.buffer)


# --- data movement -------------------------------------------------------------------------
def load(src: NkiTensor, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """HBM -> a new SBUF tile (one DMA)."""
    if not isinstance(src, NkiTensor) or src.buffer != "hbm":
        where = src.buffer.upper() if isinstance(src, NkiTensor) else type(src).__name__
        raise NKIError("nl.load", "nl.load reads HBM", f"the source is in {where}",
                       "Tiles already on chip are used directly (or copied with nl.copy)")
    out = new_tensor(torch.zeros(src.shape, dtype=as_dtype(dtype) if dtype else src.dtype),
                     "sbuf", "nl.load")
    _ops.dma("nl.load", out, src, mask)
    return out


def store(dst: NkiTensor, value: NkiTensor, mask: Any = None) -> None:
    """An SBUF (or PSUM) tile -> HBM (one DMA)."""
    if not isinstance(dst, NkiTensor) or dst.buffer != "hbm":
        raise NKIError("nl.store", "nl.store writes HBM", f"the destination is {dst!r}",
                       "Write on-chip tiles with tile[...] = value")
    if not isinstance(value, NkiTensor) or value.buffer == "hbm":
        raise NKIError("nl.store", "nl.store writes an on-chip tile to HBM",
                       f"the value is {value!r}", "Load it, compute on it, then store the tile")
    _ops.dma("nl.store", dst, value, mask)


def copy(x: NkiTensor, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """A copy into a new SBUF tile (VectorE), e.g. PSUM -> SBUF with a cast."""
    return _ops.elementwise("nl.copy", "vector", lambda a: a, [x], dtype, mask)


# --- loops and SPMD ids ------------------------------------------------------------------------
def affine_range(start: int, stop: int | None = None, step: int = 1) -> range:
    """Iterations without loop-carried dependencies (accumulation excepted)."""
    return range(start, stop, step) if stop is not None else range(start)


sequential_range = affine_range
static_range = affine_range


def program_id(axis: int = 0) -> int:
    """This instance's index along ``axis`` of the launch grid (``kernel[grid](...)``)."""
    ids = current("nl.program_id").program_ids
    return ids[axis] if axis < len(ids) else 0


def num_programs(axis: int = 0) -> int:
    grid = current("nl.num_programs").grid
    return grid[axis] if axis < len(grid) else 1


def program_ndim() -> int:
    return len(current("nl.program_ndim").grid)


# --- index expressions ----------------------------------------------------------------------
def arange(start: int, stop: int | None = None, step: int = 1) -> np.ndarray:
    """An index expression: ``nl.arange(128)[:, None]`` indexes partitions."""
    return np.arange(start, stop, step) if stop is not None else np.arange(start)


class _MGrid:
    """``nl.mgrid[0:128, 0:512]`` -> an object with ``.p`` (partition) and ``.x`` (free)."""

    def __getitem__(self, idx: Any) -> SimpleNamespace:
        grids = np.mgrid[idx]
        if isinstance(idx, slice):
            return SimpleNamespace(p=grids)
        return SimpleNamespace(p=grids[0], x=grids[1] if len(grids) > 1 else None,
                               y=grids[2] if len(grids) > 2 else None)


mgrid = _MGrid()


# --- elementwise --------------------------------------------------------------------------------
def _binary(name: str, fn: Any, engine: str = "vector") -> Any:
    api = f"nl.{name}"

    def op(x: Any, y: Any, dtype: Any = None, mask: Any = None) -> Any:
        if not isinstance(x, NkiTensor) and not isinstance(y, NkiTensor):
            if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
                return fn(torch.as_tensor(x), torch.as_tensor(y)).numpy()
            return fn(torch.as_tensor(x), torch.as_tensor(y)).item()
        return _ops.elementwise(api, engine, fn, [x, y], dtype, mask)

    op.__name__ = name
    op.__doc__ = f"Elementwise {name} on {engine}E (fp32 inside, rounded to the output dtype)."
    op._torch = fn  # type: ignore[attr-defined]
    op._engine = engine  # type: ignore[attr-defined]
    return op


def _unary(name: str, fn: Any, engine: str = "scalar") -> Any:
    api = f"nl.{name}"

    def op(x: Any, dtype: Any = None, mask: Any = None) -> Any:
        return _ops.elementwise(api, engine, fn, [x], dtype, mask)

    op.__name__ = name
    op.__doc__ = f"Elementwise {name} on {'ScalarE' if engine == 'scalar' else 'VectorE'}."
    op._torch = fn  # type: ignore[attr-defined]
    op._engine = engine  # type: ignore[attr-defined]
    return op


add = _binary("add", torch.add)
subtract = _binary("subtract", torch.sub)
multiply = _binary("multiply", torch.mul)
divide = _binary("divide", torch.div)
maximum = _binary("maximum", torch.maximum)
minimum = _binary("minimum", torch.minimum)
power = _binary("power", torch.pow)
equal = _binary("equal", lambda a, b: (a == b).float())
not_equal = _binary("not_equal", lambda a, b: (a != b).float())
greater = _binary("greater", lambda a, b: (a > b).float())
greater_equal = _binary("greater_equal", lambda a, b: (a >= b).float())
less = _binary("less", lambda a, b: (a < b).float())
less_equal = _binary("less_equal", lambda a, b: (a <= b).float())
logical_and = _binary("logical_and", lambda a, b: torch.logical_and(a, b).float())
logical_or = _binary("logical_or", lambda a, b: torch.logical_or(a, b).float())

exp = _unary("exp", torch.exp)
log = _unary("log", torch.log)
sqrt = _unary("sqrt", torch.sqrt)
rsqrt = _unary("rsqrt", torch.rsqrt)
tanh = _unary("tanh", torch.tanh)
sigmoid = _unary("sigmoid", torch.sigmoid)
sin = _unary("sin", torch.sin)
cos = _unary("cos", torch.cos)
erf = _unary("erf", torch.erf)
relu = _unary("relu", torch.relu)
gelu = _unary("gelu", torch.nn.functional.gelu)
gelu_apprx_tanh = _unary("gelu_apprx_tanh", lambda a: torch.nn.functional.gelu(a, approximate="tanh"))
silu = _unary("silu", torch.nn.functional.silu)
square = _unary("square", torch.square)
reciprocal = _unary("reciprocal", torch.reciprocal, "vector")
negative = _unary("negative", torch.neg, "vector")
abs = _unary("abs", torch.abs, "vector")  # noqa: A001
sign = _unary("sign", torch.sign, "vector")
ceil = _unary("ceil", torch.ceil, "vector")
floor = _unary("floor", torch.floor, "vector")


def softmax(x: NkiTensor, axis: int = -1, dtype: Any = None) -> NkiTensor:
    """Softmax along a free axis: max, exp(x - max) with the sum on ScalarE, divide."""
    m = max(x, axis=axis, keepdims=True)
    e = exp(subtract(x, m, dtype=float32))
    return divide(e, sum(e, axis=axis, keepdims=True), dtype=dtype or x.dtype)


def where(condition: Any, x: Any, y: Any, dtype: Any = None) -> NkiTensor:
    """``x`` where ``condition`` else ``y`` (VectorE select)."""
    xs = [condition, x, y]
    if not any(isinstance(v, NkiTensor) for v in xs):
        raise TypeError("nl.where needs at least one tile operand")
    return _ops.elementwise("nl.where", "vector", lambda c, a, b: torch.where(c.bool(), a, b),
                            xs, dtype if dtype is not None else _first_dtype(x, y))


def _first_dtype(*xs: Any) -> Any:
    for x in xs:
        if isinstance(x, NkiTensor):
            return x.dtype
    return None


# --- reductions along the free axes -------------------------------------------------------------
def sum(x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False) -> NkiTensor:  # noqa: A001
    return _ops.reduce("nl.sum", torch.sum, x, axis, keepdims, dtype)


def mean(x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False) -> NkiTensor:
    return _ops.reduce("nl.mean", torch.mean, x, axis, keepdims, dtype)


def max(x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False) -> NkiTensor:  # noqa: A001
    return _ops.reduce("nl.max", torch.amax, x, axis, keepdims, dtype)


def min(x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False) -> NkiTensor:  # noqa: A001
    return _ops.reduce("nl.min", torch.amin, x, axis, keepdims, dtype)


def prod(x: NkiTensor, axis: Any, dtype: Any = None, keepdims: bool = False) -> NkiTensor:
    def _prod(v: torch.Tensor, dim: Any, keepdim: bool) -> torch.Tensor:
        for d in sorted(dim, reverse=True):
            v = torch.prod(v, dim=d, keepdim=keepdim)
        return v

    return _ops.reduce("nl.prod", _prod, x, axis, keepdims, dtype)


# --- TensorE ------------------------------------------------------------------------------------
def matmul(x: NkiTensor, y: NkiTensor, transpose_x: bool = False) -> NkiTensor:
    """``x @ y`` into a new fp32 PSUM tile. ``transpose_x=True``: ``x`` is already
    ``[K, M]`` (contraction on partitions); otherwise a TensorE transpose comes first."""
    if not transpose_x:
        _ops.on_chip("nl.matmul", x)
        xt = transpose(x)
    else:
        xt = x
    return _ops.matmul("nl.matmul", xt, y)


def transpose(x: NkiTensor, dtype: Any = None) -> NkiTensor:
    """``x.T`` as a new SBUF tile (TensorE against the identity)."""
    return _ops.transpose("nl.transpose", x, buffer="sbuf", dtype=dtype)


# --- used by NkiTensor's operators --------------------------------------------------------------
def _write(target: NkiTensor, value: Any, api: str) -> None:
    _ops.write(target, value, api)


def _accumulate(target: NkiTensor, value: Any) -> NkiTensor:
    return _ops.accumulate(target, value)


_tensor_module._LANGUAGE.append(sys.modules[__name__])  # NkiTensor's operators
