"""Map one aten op (with CPU-tensor arguments) to the work of its eager kernel.

Why here and not in dispatch: the engine an op runs on is a fact about the hardware
(TensorE does matmuls, ScalarE transcendentals, GpSimd gathers), and the compiler needs the
same classification for its kernels. ``aten_kernel_work`` returns ``None`` for metadata-only
ops (views, size queries, allocations) which launch no kernel on the device.

Every eager kernel reads its tensor inputs from HBM and writes its outputs to HBM. Broadcast
(stride-0) inputs are counted once per distinct element. Unknown ops never raise: they are
costed as VectorE work over their output elements.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from ._aten_ops import (
    _ATTENTION,
    _CONV,
    _CONV_BWD,
    _COPY,
    _FILL,
    _GPSIMD,
    _MATMUL,
    _METADATA,
    _NO_KERNEL_NS,
    _REDUCTION,
    _SOFTMAX,
    _SORTING,
    _TRANSCENDENTAL,
    _WRITE_ONLY,
)
from .cost import KernelWork
from .rnn_work import RNN_LAYER_OPS, rnn_layer_work

__all__ = ["aten_kernel_work", "dtype_name", "launches_kernel", "op_name"]

_DTYPE_NAMES = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int8: "i8",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "ui8",
    torch.bool: "i1",
    torch.complex64: "complex<f32>",
    torch.complex128: "complex<f64>",
    torch.float8_e4m3fn: "f8E4M3FN",
    torch.float8_e5m2: "f8E5M2",
}


def op_name(func: Any) -> str:
    """Base name of an aten op without namespace, overload or in-place suffix: "add_" -> "add"."""
    schema = getattr(func, "_schema", None)
    name = schema.name if schema is not None else getattr(func, "__name__", str(func))
    name = name.split("::")[-1].split(".")[0]
    if name.endswith("_") and not name.endswith("__") and name.rstrip("_"):
        name = name[:-1]
    return name


def _namespace(func: Any) -> str:
    schema = getattr(func, "_schema", None)
    return schema.name.split("::")[0] if schema is not None and "::" in schema.name else "aten"


def _is_inplace(func: Any) -> bool:
    schema = getattr(func, "_schema", None)
    name = schema.name if schema is not None else ""
    return torch.Tag.inplace in getattr(func, "tags", ()) or name.endswith("_")


def dtype_name(dtype: torch.dtype) -> str:
    """StableHLO-style element type name of a torch dtype ("bf16", "f32", ...)."""
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def _distinct_elems(t: torch.Tensor) -> int:
    """Elements a kernel actually reads: broadcast (stride-0) dims count once."""
    n = 1
    for size, stride in zip(t.shape, t.stride(), strict=False):
        if stride != 0:
            n *= size
    return n if t.numel() else 0


def _nbytes(t: torch.Tensor) -> int:
    return _distinct_elems(t) * t.element_size()


def _numel(t: Any) -> int:
    return int(t.numel()) if isinstance(t, torch.Tensor) else 0


def _matmul_work(name: str, args: Sequence[Any], out_elems: int) -> list[tuple]:
    if name in ("addmm", "baddbmm", "addbmm", "addmv"):
        a, b = args[1], args[2]
    elif name == "linear":
        x, w = args[0], args[1]
        k = x.shape[-1] if x.dim() else 1
        n = w.shape[0] if w.dim() == 2 else 1
        return [(1, x.numel() // max(k, 1), k, n, dtype_name(x.dtype))]
    else:
        a, b = args[0], args[1]
    k = a.shape[-1] if a.dim() else 1
    m = a.shape[-2] if a.dim() >= 2 else 1
    n = b.shape[-1] if b.dim() >= 2 else 1
    if name == "addbmm":
        batch = a.shape[0]
    elif a.dim() >= 3 or b.dim() >= 3:
        batch = max(1, out_elems // max(m * n, 1))
    else:
        batch = 1
    return [(batch, m, k, n, dtype_name(a.dtype))]


def _conv_gemm(
    x: torch.Tensor,
    w: torch.Tensor,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    groups: int,
    out: torch.Tensor | None,
) -> tuple[int, int, int, int, str]:
    """Implicit GEMM of a convolution: (groups, batch*out_spatial, Cin/g*prod(k), Cout/g)."""
    groups = max(1, int(groups))
    kernel = list(w.shape[2:])
    ksize = math.prod(kernel)
    n_batch = x.shape[0] if x.dim() == len(kernel) + 2 else 1
    spatial_in = list(x.shape[-len(kernel) :]) if kernel else []
    if transposed:
        # weight is [Cin, Cout/g, *k]: every input pixel scatters Cout/g * k outputs
        cin = w.shape[0]
        return (groups, n_batch * math.prod(spatial_in), cin // groups,
                w.shape[1] * ksize, dtype_name(x.dtype))  # fmt: skip
    if out is not None and out.dim() >= len(kernel):
        spatial_out = list(out.shape[-len(kernel) :]) if kernel else []
    else:
        spatial_out = []
        for i, size in enumerate(spatial_in):
            s = stride[i] if i < len(stride) else stride[0]
            p = padding[i] if i < len(padding) else padding[0]
            d = dilation[i] if i < len(dilation) else dilation[0]
            spatial_out.append((size + 2 * p - d * (kernel[i] - 1) - 1) // s + 1)
    cout = w.shape[0]
    return (groups, n_batch * math.prod(spatial_out), w.shape[1] * ksize, cout // groups,
            dtype_name(x.dtype))  # fmt: skip


def _conv_args(args: Sequence[Any], kwargs: dict[str, Any], first: int) -> tuple:
    """(stride, padding, dilation, transposed, groups) from convolution-like arguments."""
    a = list(args)
    names = ["stride", "padding", "dilation", "transposed", "output_padding", "groups"]
    vals = {n: (a[first + i] if first + i < len(a) else kwargs.get(n)) for i, n in enumerate(names)}
    stride = list(vals["stride"] or [1])
    padding = vals["padding"] if isinstance(vals["padding"], (list, tuple)) else [0]
    dilation = list(vals["dilation"] or [1])
    return stride, list(padding or [0]), dilation, bool(vals["transposed"]), vals["groups"] or 1


def _classify(
    name: str,
    func: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    outs: list[torch.Tensor],
    foreach: bool = False,
) -> KernelWork:
    out_elems = sum(_numel(t) for t in outs)
    ins = [t for t in _tensors(list(args)) if isinstance(t, torch.Tensor)]
    in_elems = sum(_distinct_elems(t) for t in ins)
    work = KernelWork()
    if name in _MATMUL:
        work.matmuls = _matmul_work(name, args, out_elems)
        if name.startswith("add") or (name == "linear" and len(args) > 2 and args[2] is not None):
            work.vector_elems = out_elems  # bias / accumulate on PSUM eviction
    elif name in _CONV:
        stride, padding, dilation, transposed, groups = _conv_args(args, kwargs, 3)
        if name in ("conv1d", "conv2d", "conv3d"):
            transposed, groups = False, (args[6] if len(args) > 6 else kwargs.get("groups", 1))
        out = outs[0] if outs else None
        work.matmuls = [_conv_gemm(args[0], args[1], stride, padding, dilation, transposed,
                                   groups, out)]  # fmt: skip
        if len(args) > 2 and isinstance(args[2], torch.Tensor):
            work.vector_elems = out_elems
    elif name in _CONV_BWD:
        grad_out, x, w = args[0], args[1], args[2]
        stride, padding, dilation, transposed, groups = _conv_args(args, kwargs, 4)
        g, m, k, n, dt = _conv_gemm(x, w, stride, padding, dilation, transposed, groups, grad_out)
        mask = args[10] if len(args) > 10 else kwargs.get("output_mask", [True, True, True])
        if mask[0]:
            work.matmuls.append((g, m, n, k, dt))  # grad_input = grad_out @ W^T
        if mask[1]:
            work.matmuls.append((g, k, m, n, dt))  # grad_weight = X^T @ grad_out
        if len(mask) > 2 and mask[2]:
            work.vector_elems = _numel(grad_out)  # grad_bias: a reduction
    elif name in _ATTENTION:
        q, k_, v = args[0], args[1], args[2]
        bh = q.numel() // max(q.shape[-1] * q.shape[-2], 1)
        lq, e, s, ev = q.shape[-2], q.shape[-1], k_.shape[-2], v.shape[-1]
        dt = dtype_name(q.dtype)
        work.matmuls = [(bh, lq, e, s, dt), (bh, lq, s, ev, dt)]
        work.scalar_elems = bh * lq * s  # exp of the scores
        work.vector_elems = 3 * bh * lq * s  # max, subtract, sum
    elif name in _SOFTMAX:
        work.vector_elems = 3 * in_elems
        work.scalar_elems = in_elems
    elif name in _REDUCTION:
        factor = 2 if name in ("var", "std", "var_mean", "std_mean") else 1
        if "norm" in name and name not in ("norm", "linalg_vector_norm"):
            factor = 3  # statistics, normalize, affine
        work.vector_elems = factor * in_elems
    elif name in _TRANSCENDENTAL:
        work.scalar_elems = out_elems
        if len(ins) > 1 and not foreach:  # binary: the second operand goes through VectorE
            work.vector_elems = out_elems * (len(ins) - 1)
    elif name in _GPSIMD:
        if name in _SORTING and ins:
            dim_size = max((int(t.shape[-1]) if t.dim() else 1) for t in ins[:1])
            work.gpsimd_elems = in_elems * max(1, math.ceil(math.log2(max(2, dim_size))))
        else:
            work.gpsimd_elems = max(out_elems, in_elems if name.startswith("scatter") else 0)
        if name == "native_dropout":
            work.vector_elems = out_elems
    elif name in _COPY:
        pass  # DMA only
    elif name in _FILL:
        work.vector_elems = out_elems  # memset-like: one write per element
    elif foreach:
        work.vector_elems = max(in_elems, out_elems)  # every input element is read once
    elif torch.Tag.pointwise in getattr(func, "tags", ()) or name == "where":
        work.vector_elems = max(out_elems, 1) * max(1, len(ins))
    else:
        work.vector_elems = out_elems or in_elems
    if name in _WRITE_ONLY:
        work.hbm_read_bytes = 0
    else:
        out_ids = {id(t) for t in _tensors(kwargs.get("out"))}
        reads = [t for t in ins if id(t) not in out_ids]
        if name in ("copy", "_copy_from"):  # copy_(dst, src): dst is only written
            reads = [t for t in _tensors(list(args)[1:2])]
        work.hbm_read_bytes = sum(_nbytes(t) for t in reads) + sum(
            _nbytes(t) for k, v in kwargs.items() if k != "out" for t in _tensors(v)
        )
    work.hbm_write_bytes = sum(_nbytes(t) for t in outs)
    return work


_HOST_READS = ("_local_scalar_dense", "is_nonzero")
# Ops that check on the host and launch nothing: the compiler's index-range check
# (compiler/index_bounds.py), when a graph holding it runs op by op.
_HOST_CHECKS = frozenset({"torchneuron::index_bounds"})


def launches_kernel(func: Any) -> bool:
    """Whether ``func`` can launch a kernel; False for metadata-only ops (views, size
    queries, allocations), whose ``aten_kernel_work`` is None whatever the arguments.

    Why apart: eager dispatch asks once per overload, and then skips everything a
    kernel's cost needs (signature key, result metadata) for the metadata-only ones.
    """
    name = op_name(func)
    if name in _HOST_READS:
        return True
    schema = getattr(func, "_schema", None)
    if schema is not None and schema.name in _HOST_CHECKS:
        return False
    return not (
        getattr(func, "is_view", False) or name in _METADATA or _namespace(func) in _NO_KERNEL_NS
    )


def aten_kernel_work(
    func: Any, args: Sequence[Any], kwargs: dict[str, Any] | None, out: Any
) -> KernelWork | None:
    """Work of the eager kernel for ``func(*args, **kwargs) -> out``; None if metadata-only.

    ``out`` is the op's result: a tensor, a tuple/list of tensors (non-tensors ignored) or None.
    """
    kwargs = kwargs or {}
    name = op_name(func)
    if name in _HOST_READS:  # .item(): device-to-host read
        t = args[0] if args and isinstance(args[0], torch.Tensor) else None
        nbytes = t.element_size() if t is not None else 8
        return KernelWork(hbm_read_bytes=nbytes)
    if not launches_kernel(func):
        return None
    if name == "all_gather_copy_in":
        # FSDP2's copy of a rank's shards into its slice of the all-gather buffer: a copy
        # (DMA only) of the shards' bytes, not the whole buffer it returns a view of
        nbytes = sum(_nbytes(t) for t in _tensors(args[0]))
        return KernelWork(hbm_read_bytes=nbytes, hbm_write_bytes=nbytes)
    outs = list(_tensors(out))
    if not outs and _is_inplace(func) and args:
        outs = list(_tensors(args[0]))  # _foreach_add_ & co. return None but write self
    if name in RNN_LAYER_OPS:  # a whole sequence's LSTM layer (``rnn_work``)
        return rnn_layer_work(name, args, outs, dtype_name(args[0].dtype))
    foreach = name.startswith("_foreach_")
    if foreach:
        name = name[len("_foreach_") :]  # the same kernel over a list of tensors
    try:
        return _classify(name, func, args, kwargs, outs, foreach)
    except Exception:  # never crash on an op we do not understand: cost it as vector work
        elems = sum(_numel(t) for t in outs)
        nbytes = sum(t.numel() * t.element_size() for t in outs)
        return KernelWork(vector_elems=elems, hbm_write_bytes=nbytes)
