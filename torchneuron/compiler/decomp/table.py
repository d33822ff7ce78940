"""The decomposition table used by `prepare`: core aten + Torch-MLIR's + our own entries.

Our own entries exist because this torch-mlir cannot lower some ops that real training
graphs contain (max_pool2d_with_indices and its backward, empty_permuted from dropout,
hypot, ...), or lowers them in a way that crashed it (logsumexp). Random ops are never
decomposed here: `random_ops` lifts them out of the graph so eager's own kernel draws
them (a decomposition into rand + arithmetic would draw different numbers), with one
exception, native_dropout, which becomes `bernoulli.p` + arithmetic in the exact order of
ATen's CPU kernel so the numbers stay bitwise equal.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._decomp import core_aten_decompositions

from torchneuron.compiler.decomp.registry import registrar
from torchneuron.compiler.errors import PrepareError
from torchneuron.compiler.prepare.random_ops import is_random_op

__all__ = ["decomposition_table", "OWN_DECOMPOSITIONS"]

aten = torch.ops.aten
OWN_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}


_register = registrar(OWN_DECOMPOSITIONS)


# Random composites that *do* need decomposing into primitive random ops.
_RANDOM_COMPOSITES_KEPT = {"rrelu", "lstm", "gru", "rnn_tanh", "rnn_relu",
                           "scaled_dot_product_attention", "native_dropout"}


# Ops this torch-mlir cannot lower for which PyTorch's *full* decomposition table (not the
# core subset) has an entry that lowers and matches eager (checked by
# tools/lowering_coverage.py). Names are overload packets; every overload is taken.
FROM_TORCH_TABLE = (
    "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d", "addmv",
    "diagonal", "diagonal_copy", "as_strided_copy", "permute_copy", "unbind_copy",
    "view_copy", "narrow_copy", "dist",
)
# Tried and rejected: refs that only forward to a prim this torch-mlir cannot lower either
# (lgamma, digamma, erfc, erfinv, i0, special_*: ours are in decomp_special.py), cumprod (needs
# prims.prod), diagonal_scatter (prims.copy_to), and unfold / unfold_copy, whose lowering
# segfaults torch-mlir.


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict[Any, Callable[..., Any]]:
    """Core aten decompositions + `torch_mlir.fx.get_decomposition_table()` + ours.

    Cached (built once per process); callers must not mutate it."""
    import torch_mlir.fx as tmfx
    from torch._decomp import decomposition_table as full_table

    table: dict[Any, Callable[..., Any]] = dict(core_aten_decompositions())
    table.update(tmfx.get_decomposition_table())
    wanted = set(FROM_TORCH_TABLE)
    for op, fn in full_table.items():
        packet = getattr(op, "_overloadpacket", None)
        if packet is not None and packet.__name__ in wanted:
            table.setdefault(op, fn)
    for op in list(table):
        name = getattr(op, "__name__", str(op)).split(".")[0]
        if is_random_op(op) and name not in _RANDOM_COMPOSITES_KEPT:
            del table[op]  # keep primitive random ops intact for random_ops
    from torchneuron.compiler.decomp import lowering_fixes as corrections  # noqa: F401  (registers its entries)

    table.update(OWN_DECOMPOSITIONS)
    for extra in _extra_tables():
        table.update(extra)
    from torchneuron.compiler.decomp.batch_norm_eval import batch_norm_eval_decompositions

    table.update(batch_norm_eval_decompositions(table))  # eval mode; wraps the entries before
    from torchneuron.compiler.decomp.half_batch_norm import half_batch_norm_decompositions

    table.update(half_batch_norm_decompositions(table))  # float16 training; wraps the entries
    from torchneuron.compiler.decomp.cpu_dependent import cpu_dependent_decompositions

    table.update(cpu_dependent_decompositions(table))  # refusals; wrap the entries before
    from torchneuron.compiler.decomp.int_avg_pool import int_avg_pool_decompositions

    table.update(int_avg_pool_decompositions(table))  # integers refused; wraps the entries
    from torchneuron.compiler.decomp.half_conv import half_conv_decompositions

    table.update(half_conv_decompositions(table))  # halves refused; wraps the entries
    from torchneuron.compiler.decomp.half_var import half_var_decompositions

    table.update(half_var_decompositions(table))  # halves in float64; wraps the entries
    from torchneuron.compiler.decomp.half_norm import half_norm_decompositions

    table.update(half_norm_decompositions(table))  # halves in float32; wraps the entries
    from torchneuron.compiler.decomp.fft import fft_decompositions
    from torchneuron.compiler.decomp.shapes import shape_decompositions

    table.update(fft_decompositions(table))  # complex values only; real: the entry before
    from torchneuron.compiler.decomp.opmath import opmath_decompositions

    table.update(opmath_decompositions(table))  # half in float32; wraps the entries before
    from torchneuron.compiler.decomp.half_log_softmax import half_log_softmax_decompositions

    table.update(half_log_softmax_decompositions(table))  # last dim of halves: eager's roundings
    table.update(shape_decompositions(table))  # wraps the entries above, so last
    from torchneuron.compiler.prepare.index_bounds import with_index_checks

    table.update(with_index_checks(table))  # out-of-range indices raise: outermost
    from torchneuron.compiler.decomp import host_numerics

    host_numerics.settle()  # the premises of the entries above, before anything traces
    return table


def _extra_tables() -> list[dict[Any, Callable[..., Any]]]:
    """Decompositions kept in their own modules (one family of ops each)."""
    from torchneuron.compiler.decomp.addc import ADDC_DECOMPOSITIONS
    from torchneuron.compiler.decomp.bessel import BESSEL_DECOMPOSITIONS
    from torchneuron.compiler.decomp.conv import CONV_DECOMPOSITIONS
    from torchneuron.compiler.decomp.cumulative import CUMULATIVE_DECOMPOSITIONS
    from torchneuron.compiler.decomp.custom import custom_op_decompositions
    from torchneuron.compiler.decomp.division import DIVISION_DECOMPOSITIONS
    from torchneuron.compiler.decomp.elementwise import ELEMENTWISE_DECOMPOSITIONS
    from torchneuron.compiler.decomp.embedding_bag import EMBEDDING_BAG_DECOMPOSITIONS
    from torchneuron.compiler.decomp.extremes import EXTREMES_DECOMPOSITIONS
    from torchneuron.compiler.decomp.fmod import FMOD_DECOMPOSITIONS
    from torchneuron.compiler.decomp.foreach import FOREACH_DECOMPOSITIONS
    from torchneuron.compiler.decomp.fractional import FRACTIONAL_DECOMPOSITIONS
    from torchneuron.compiler.decomp.half_mean import HALF_MEAN_DECOMPOSITIONS
    from torchneuron.compiler.decomp.half_scalar import HALF_SCALAR_DECOMPOSITIONS
    from torchneuron.compiler.decomp.index import INDEX_DECOMPOSITIONS
    from torchneuron.compiler.decomp.lu import LU_DECOMPOSITIONS
    from torchneuron.compiler.decomp.pad import PAD_DECOMPOSITIONS
    from torchneuron.compiler.decomp.pool import POOL_DECOMPOSITIONS
    from torchneuron.compiler.decomp.pow import POW_DECOMPOSITIONS
    from torchneuron.compiler.decomp.qr import QR_DECOMPOSITIONS
    from torchneuron.compiler.decomp.relu import RELU_DECOMPOSITIONS
    from torchneuron.compiler.decomp.resample import RESAMPLE_DECOMPOSITIONS
    from torchneuron.compiler.decomp.resize import RESIZE_DECOMPOSITIONS
    from torchneuron.compiler.decomp.special import SPECIAL_DECOMPOSITIONS
    from torchneuron.compiler.decomp.tie_order import TIE_ORDER_DECOMPOSITIONS
    from torchneuron.compiler.decomp.upsample_linear import UPSAMPLE_LINEAR_DECOMPOSITIONS
    from torchneuron.compiler.decomp.zeta import ZETA_DECOMPOSITIONS

    # The fused LSTM/GRU cells PyTorch picks for the device have no CPU kernel to trace;
    # the device's own implementation (plain torch ops) is their decomposition.
    from torchneuron.dispatch.rnn import FUSED_CELL_KERNELS

    return [CONV_DECOMPOSITIONS, POOL_DECOMPOSITIONS, PAD_DECOMPOSITIONS, FUSED_CELL_KERNELS,
            FRACTIONAL_DECOMPOSITIONS, SPECIAL_DECOMPOSITIONS, ELEMENTWISE_DECOMPOSITIONS,
            LU_DECOMPOSITIONS, QR_DECOMPOSITIONS, INDEX_DECOMPOSITIONS,
            RESAMPLE_DECOMPOSITIONS, RESIZE_DECOMPOSITIONS, BESSEL_DECOMPOSITIONS,
            EMBEDDING_BAG_DECOMPOSITIONS, ZETA_DECOMPOSITIONS, EXTREMES_DECOMPOSITIONS,
            DIVISION_DECOMPOSITIONS, FMOD_DECOMPOSITIONS, HALF_MEAN_DECOMPOSITIONS,
            POW_DECOMPOSITIONS, RELU_DECOMPOSITIONS, TIE_ORDER_DECOMPOSITIONS,
            ADDC_DECOMPOSITIONS, CUMULATIVE_DECOMPOSITIONS, HALF_SCALAR_DECOMPOSITIONS,
            FOREACH_DECOMPOSITIONS, UPSAMPLE_LINEAR_DECOMPOSITIONS, custom_op_decompositions()]


# --------------------------------------------------------------------------- random


@_register(aten.native_dropout.default)
def native_dropout(x: torch.Tensor, p: float, train: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    """ATen CPU: mask = empty_like(x).bernoulli_(1-p); out = x.mul(mask).mul_(scale).

    ``empty_like`` keeps x's layout and ``bernoulli_`` fills memory in order, so the mask
    is drawn here as a *contiguous* tensor of x's physical shape and permuted back: the
    draw is then a plain ``bernoulli.p`` on a contiguous tensor, whose order no later
    pass can change (random_ops refuses ``bernoulli.p`` on any other layout).
    """
    from torch._prims_common import compute_elementwise_output_logical_to_physical_perm

    if train is False or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    p1m = 1.0 - p
    scale = 0.0 if p1m == 0 else 1.0 / p1m
    perm, _ = compute_elementwise_output_logical_to_physical_perm(x)
    physical = torch.empty([x.shape[d] for d in perm], dtype=x.dtype, device=x.device)
    inverse = [0] * len(perm)
    for i, d in enumerate(perm):
        inverse[d] = i
    mask = aten.bernoulli.p(physical, p1m).permute(inverse)
    out = x * mask * scale
    return out, mask.to(torch.bool)


@_register(aten.empty_permuted.default)
def empty_permuted(size: Sequence[int], physical_layout: Sequence[int], **kwargs: Any) -> torch.Tensor:
    """Keep the layout: values are unspecified, but a random op that fills this tensor
    (dropout's ``empty_like(x).bernoulli_(p)``) draws in memory order, so the strides
    decide which element gets which draw."""
    strides = [0] * len(size)
    step = 1
    for dim in reversed(list(physical_layout)):
        strides[dim] = step
        step *= max(int(size[dim]), 1)
    return torch.empty_strided(list(size), strides,
                               **{k: v for k, v in kwargs.items() if v is not None})


# --------------------------------------------------------------------------- pooling


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1  # the last window must start inside the input or the left padding
    return out


def _tuple(v: Sequence[int] | int, nd: int, default: Sequence[int] | None = None
           ) -> tuple[int, ...]:
    v = [v] if isinstance(v, int) else (list(v) or list(default or []))
    return tuple(v * nd if len(v) == 1 else v)


def _pair(v: Sequence[int] | int, default: Sequence[int] | None = None) -> tuple[int, int]:
    a, b = _tuple(v, 2, default)
    return a, b


def _flat_positions(starts: list[torch.Tensor], offsets: Sequence[int],
                    space: Sequence[int]) -> torch.Tensor:
    """(o1, ..., ond): the flat row-major input index of position start + offset per dim
    (out-of-range coordinates give a meaningless number; callers mask them)."""
    nd = len(space)
    flat = None
    step = 1
    for i in reversed(range(nd)):
        shape = [1] * nd
        shape[i] = -1
        term = ((starts[i] + offsets[i]) * step).reshape(shape) if step != 1 else \
            (starts[i] + offsets[i]).reshape(shape)  # fmt: skip
        flat = term if flat is None else term + flat
        step *= space[i]
    assert flat is not None
    return flat


def _windows_nd(x: torch.Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                ceil_mode: bool, pad_value: float, overhang_value: float, nd: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack the prod(k) strided views of the padded input: (..., K, *outs) values and the
    flat input index (K, *outs) each one reads (kernel offsets in row-major order, ATen's
    scan order), with slices only (no gather, no window op). ``overhang_value`` fills
    what ceil_mode windows read beyond the padding."""
    k = _tuple(kernel_size, nd)
    s = _tuple(stride, nd, k)
    p = _tuple(padding, nd)
    d = _tuple(dilation, nd)
    space = list(x.shape[-nd:])
    outs = [_pool_out(space[i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(nd)]
    need = [(outs[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 for i in range(nd)]
    pads: list[int] = []
    extra: list[int] = []
    for i in reversed(range(nd)):  # constant_pad_nd lists the last dim first
        pads += [p[i], p[i]]
        extra += [0, max(0, need[i] - space[i] - 2 * p[i])]
    xp = aten.constant_pad_nd(x, pads, pad_value)
    xp = aten.constant_pad_nd(xp, extra, overhang_value)
    starts = [torch.arange(outs[i], device=x.device) * s[i] - p[i] for i in range(nd)]
    vals, idxs = [], []
    for offs in itertools.product(*(range(n) for n in k)):
        at = tuple(slice(o * d[i], o * d[i] + (outs[i] - 1) * s[i] + 1, s[i])
                   for i, o in enumerate(offs))
        vals.append(xp[(Ellipsis, *at)])
        idxs.append(_flat_positions(starts, [o * d[i] for i, o in enumerate(offs)], space))
    return torch.stack(vals, dim=-nd - 1), torch.stack(idxs, dim=0)


def _windows(x: torch.Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
             ceil_mode: bool, pad_value: float, overhang_value: float
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``_windows_nd`` over the last two dims."""
    return _windows_nd(x, kernel_size, stride, padding, dilation, ceil_mode, pad_value,
                       overhang_value, 2)


def _lowest(dtype: torch.dtype) -> float:
    return -math.inf if dtype.is_floating_point else float(torch.iinfo(dtype).min)


def _inside_indices(idxs: torch.Tensor, space: Sequence[int], kernel_size: Any, stride: Any,
                    padding: Any, dilation: Any, device: torch.device) -> torch.Tensor:
    """``_windows_nd``' (K, *outs) index table with each position outside the input
    replaced by its window's first position inside it (the first inside coordinate per
    dim: a window's inside positions are a grid)."""
    nd = len(space)
    k = _tuple(kernel_size, nd)
    s = _tuple(stride, nd, k)
    p = _tuple(padding, nd)
    d = _tuple(dilation, nd)
    outs = list(idxs.shape[1:])
    starts = [torch.arange(outs[i], device=device) * s[i] - p[i] for i in range(nd)]
    firsts = [st + torch.div(torch.clamp(-st, min=0) + d[i] - 1, d[i], rounding_mode="floor") * d[i]
              for i, st in enumerate(starts)]
    first = _flat_positions(firsts, [0] * nd, space)
    inside = []
    for offs in itertools.product(*(range(n) for n in k)):
        ok = None
        for i, o in enumerate(offs):
            c = starts[i] + o * d[i]
            shape = [1] * nd
            shape[i] = -1
            m = ((c >= 0) & (c < space[i])).reshape(shape)
            ok = m if ok is None else ok & m
        assert ok is not None
        inside.append(ok.expand(outs))
    return torch.where(torch.stack(inside, dim=0), idxs, first)


def _max_pool_with_indices(x: torch.Tensor, kernel_size: Any, stride: Any, padding: Any,
                           dilation: Any, ceil_mode: bool, nd: int
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Max over the stacked windows; index = flat row-major index of the first maximum
    (ATen's), selected with a one-hot sum rather than a gather (elementwise work only). A
    padding position wins only in a window whose elements are all -inf: ATen then reports
    the window's first element inside the input, so the table names that one there."""
    from torchneuron.compiler.decomp.extremes import nan_blind_max

    low = _lowest(x.dtype)
    space = list(x.shape[-nd:])
    vals, idxs = _windows_nd(x, kernel_size, stride, padding, dilation, ceil_mode, low, low, nd)
    idxs = _inside_indices(idxs, space, kernel_size, stride, padding, dilation, x.device)
    out, arg = nan_blind_max(vals, -nd - 1)
    k = idxs.shape[0]
    onehot = arg.unsqueeze(-nd - 1) == torch.arange(k, device=x.device).reshape(k, *[1] * nd)
    index = torch.where(onehot, idxs, torch.zeros_like(idxs)).sum(-nd - 1)
    if not x.dtype.is_floating_point:
        return out, index
    # ATen takes a NaN over anything, the window's last one (its largest flat index);
    # the max above never picks one: each window's largest NaN index, -1 if none (a float
    # max-pool of exact integer keys, as fast as the one above)
    numel = math.prod(space)
    kdt = torch.float32 if numel <= 2**24 else torch.float64
    flat = torch.arange(numel, device=x.device, dtype=kdt).reshape(space)
    key = torch.where(torch.isnan(x), flat, torch.full_like(flat, -1.0))
    keys, _ = _windows_nd(key, kernel_size, stride, padding, dilation, ceil_mode, -1.0, -1.0, nd)
    kmax, _ = nan_blind_max(keys, -nd - 1)
    last = kmax.to(torch.int64)
    nan = last >= 0
    value = torch.gather(x.flatten(-nd), -1, last.clamp(min=0).flatten(-nd)).reshape(out.shape)
    return torch.where(nan, value, out), torch.where(nan, last, index)


@_register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """``_max_pool_with_indices`` over the last two dims."""
    return _max_pool_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode, 2)


@_register(aten.max_pool3d_with_indices.default)
def max_pool3d_with_indices(x: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """``_max_pool_with_indices`` over the last three dims (PyTorch's decomposition, used
    before, takes no NaN and reports no eager index for an all -inf window).

    Not for a channels-last input (the op is traced as is, which this Torch-MLIR cannot
    lower: the lowering refuses it and the graph runs eagerly): ATen's channels-last CPU
    kernel reports, for an all -inf window in the channels past its last full vector (how
    many depends on the CPU's vector width), the index without its depth term (0 instead
    of 30), which no table here can reproduce on every machine."""
    from torch._prims_common import suggest_memory_format

    if x.dim() == 5 and suggest_memory_format(x) == torch.channels_last_3d:
        return NotImplemented
    return _max_pool_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode, 3)


@_register(aten.avg_pool2d.default)
def avg_pool2d(x: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> torch.Tensor:
    """Window sums / ATen's divisor (padding counts if asked, ceil overhang never does)."""
    vals, _ = _windows(x, kernel_size, stride, padding, 1, ceil_mode, 0.0, 0.0)
    total = vals.sum(-3)
    if divisor_override:
        return total / divisor_override
    ones = torch.ones(x.shape[-2:], dtype=x.dtype, device=x.device)
    cnt, _ = _windows(ones, kernel_size, stride, padding, 1, ceil_mode,
                      1.0 if count_include_pad else 0.0, 0.0)
    return total / cnt.sum(-3)


@_register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad: torch.Tensor, x: torch.Tensor, kernel_size: Any,
                                     stride: Any, padding: Any, dilation: Any, ceil_mode: bool,
                                     indices: torch.Tensor) -> torch.Tensor:
    """Scatter-add each output gradient onto the input element its index names."""
    h, w = x.shape[-2], x.shape[-1]
    lead = x.shape[:-2]
    g = grad.reshape(*lead, -1)
    idx = indices.reshape(*lead, -1)
    zeros = torch.zeros(*lead, h * w, dtype=grad.dtype, device=grad.device)
    return torch.scatter_add(zeros, -1, idx, g).reshape(x.shape)


# --------------------------------------------------------------------------- math


@_register(aten.isfinite.default)
def isfinite(x: torch.Tensor) -> torch.Tensor:
    """``|x| < inf``: false for NaN and both infinities. ATen's composite,
    ``(x == x) * (|x| != inf)``, loses the NaN test: Torch-MLIR folds ``x == x`` to
    true. Integer and bool elements are all finite; complex keeps the previous entry."""
    if x.dtype.is_complex:
        return NotImplemented
    if not x.dtype.is_floating_point:
        return torch.ones_like(x, dtype=torch.bool)
    return torch.abs(x) < math.inf


@_register(aten.eq.Tensor)
def eq_tensor(a: torch.Tensor, b: Any) -> torch.Tensor:
    """``x == x`` of a float tensor is ``~isnan(x)``: Torch-MLIR folds an equality of a
    value with itself to true, which is wrong at NaN. Other equalities are traced as is."""
    if a is b and (a.dtype.is_floating_point or a.dtype.is_complex):
        return torch.logical_not(torch.isnan(a))
    return NotImplemented


@_register(aten.hypot.default)
def hypot(a: torch.Tensor, b: torch.Tensor) -> Any:
    """As eager's (Sleef's) hypot: no overflow (``sqrt(a*a + b*b)`` gave inf at 1e30 in
    float32), inf when either side is infinite, even with a NaN other side. float32 and
    narrower: the exact sum of squares in float64, rounded once to float32 (eager's
    correctly rounded float32 result, then its dtype). float64 is refused
    (``hypot-float64``): eager's vectorised loop (Sleef) rounds correctly and its scalar
    tail (the C library's hypot) is an ulp off about once in 500 values, so eager's bits
    depend on where an element sits; NotImplemented while AOTAutograd traces (a raise
    there escapes torch.compile), so prepare's own trace refuses."""
    dtype = torch.result_type(a, b)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    if dtype == torch.float64:
        if torch._guards.TracingContext.try_get() is not None:
            return NotImplemented
        raise PrepareError(
            "aten.hypot: eager's float64 hypot rounds differently in its vectorised loop "
            "and its scalar tail, so no lowering matches it; this region runs eagerly.",
            op="aten.hypot", reason="hypot-float64")
    x, y = a.to(dtype).abs().double(), b.to(dtype).abs().double()
    r = torch.sqrt(x * x + y * y)
    r = torch.where((x == math.inf) | (y == math.inf), math.inf, r)  # float64 constants:
    return r.to(torch.float32).to(dtype)  # (bfloat16's need ml_dtypes)


@_register(aten.logsumexp.default)
def logsumexp(x: torch.Tensor, dim: Sequence[int], keepdim: bool = False) -> torch.Tensor:
    """Stable form; the max is taken as 0 where it is infinite (all -inf rows give -inf)."""
    if not x.dtype.is_floating_point:
        x = x.to(torch.get_default_dtype())
    dims = list(dim) if len(dim) else list(range(x.dim()))
    if x.dim() == 0:
        return x.clone()
    m = torch.amax(x, dims, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    out = torch.log(torch.sum(torch.exp(x - m), dims, keepdim=True)) + m
    return out if keepdim else out.squeeze(dims)


# --------------------------------------------------------------------------- prims
# Core decompositions (nll_loss_forward among them) emit prims.squeeze, a view prim that
# functionalization refuses ("custom operator whose output has alias annotations").
@_register(torch.ops.prims.squeeze.default)
def prims_squeeze(x: torch.Tensor, dimensions: Sequence[int]) -> torch.Tensor:
    # Not aten.squeeze: its own decomposition is prims.squeeze. Dropping size-1 dims is
    # always expressible as a view.
    drop = {d % max(x.dim(), 1) for d in dimensions}
    return aten.view.default(x, [s for i, s in enumerate(x.shape) if i not in drop])


@_register(torch.ops.prims.view_of.default)
def prims_view_of(x: torch.Tensor) -> torch.Tensor:
    """Another view prim functionalization refuses (``aten.squeeze``'s reference returns it
    when no dim has size 1, as in linear_cross_entropy's chunked loop): a same-shape view."""
    return aten.view.default(x, list(x.shape))


# --------------------------------------------------------------------------- scans, selection


@_register(aten.cumprod.default)
def cumprod(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Log-depth scan (Hillis-Steele): ceil(log2 n) shifted multiplies, no loop op."""
    y = (x.to(dtype) if dtype is not None else x).movedim(dim, -1) if x.dim() else x
    if x.dim() == 0:
        return y.clone()
    n, k = y.shape[-1], 1
    while k < n:
        y = y * aten.constant_pad_nd(y[..., : n - k], [k, 0], 1.0)
        k *= 2
    return y.movedim(-1, dim)


def _logaddexp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m = torch.maximum(a, b)
    out = m + torch.log1p(torch.exp(-torch.abs(a - b)))
    return torch.where(torch.isinf(m) & (a == b), a, out)  # -inf/-inf, inf/inf


@_register(aten.logcumsumexp.default)
def logcumsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Log-depth scan of logaddexp: exact running max, so tiny early terms never underflow
    to -inf and large ones never overflow (torch-mlir's log(cumsum(exp)) does both)."""
    if x.dim() == 0:
        return x.clone()
    y = x.movedim(dim, -1)
    n, k = y.shape[-1], 1
    while k < n:
        y = _logaddexp(y, aten.constant_pad_nd(y[..., : n - k], [k, 0], -math.inf))
        k *= 2
    return y.movedim(-1, dim)


@_register(aten.kthvalue.default)
def kthvalue(x: torch.Tensor, k: int, dim: int = -1, keepdim: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor]:
    if x.dim() == 0:  # k is 1 (eager checks): the value itself, index 0
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    vals, idx = torch.sort(x, dim=dim)  # sort.stable has no lowering
    v, i = vals.narrow(dim, k - 1, 1), idx.narrow(dim, k - 1, 1)
    return (v, i) if keepdim or x.dim() == 0 else (v.squeeze(dim), i.squeeze(dim))


def _bool_dims(single: Any, whole: Any, x: torch.Tensor, dim: Sequence[int] | None,
               keepdim: bool) -> Any:
    """any / all over several dims (no lowering): one single-dim reduction per dim, last
    dim first so the remaining dim numbers stay valid. ``None`` reduces every dim; an empty
    list none (elementwise != 0). uint8 stays uint8, as in ATen."""
    if x.dim() == 0:
        return NotImplemented
    if x.dtype == torch.uint8:
        return _bool_dims(single, whole, x != 0, dim, keepdim).to(torch.uint8)
    if dim is not None and len(dim) == 0:
        return x != 0
    if dim is None:
        out = whole(x)
        return out.reshape([1] * x.dim()) if keepdim else out
    out = x
    for d in sorted({d % x.dim() for d in dim}, reverse=True):
        out = single(out, d, keepdim)
    return out


def _uint8_as_bool(op: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """any / all of uint8 give uint8 0 / 1 in ATen; the lowering gave the max (any of
    [0, 3] was 3). Reduced as bool, then converted back."""
    if x.dtype != torch.uint8:
        return NotImplemented
    return op(x != 0, *args, **kwargs).to(torch.uint8)


# (all.default / all.dim keep PyTorch's own decomposition, which gets uint8 right)
for _bool_op in (aten.any.default, aten.any.dim):
    OWN_DECOMPOSITIONS[_bool_op] = lambda x, *a, _op=_bool_op, **k: _uint8_as_bool(_op, x, *a, **k)


@_register(aten.any.dims)
def any_dims(x: torch.Tensor, dim: Sequence[int] | None = None, keepdim: bool = False) -> Any:
    return _bool_dims(aten.any.dim, aten.any.default, x, dim, keepdim)


@_register(aten.all.dims)
def all_dims(x: torch.Tensor, dim: Sequence[int] | None = None, keepdim: bool = False) -> Any:
    return _bool_dims(aten.all.dim, aten.all.default, x, dim, keepdim)


@_register(aten.sort.stable)
def sort_stable(x: torch.Tensor, *, stable: bool | None = None, dim: int = -1,
                descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``sort.default``: its lowering (``stablehlo.sort``) runs as a stable sort, so equal
    keys keep their order whether or not ``stable`` was asked for."""
    return aten.sort.default(x, dim, descending)


@_register(aten.median.default)
def median(x: torch.Tensor) -> torch.Tensor:
    flat = torch.sort(x.reshape(-1)).values
    mid = flat[(flat.numel() - 1) // 2]
    return torch.where(torch.isnan(x).any(), torch.full_like(mid, math.nan), mid)


@_register(aten.nanmedian.default)
def nanmedian(x: torch.Tensor) -> torch.Tensor:
    flat = torch.sort(x.reshape(-1)).values  # NaNs sort last
    count = (~torch.isnan(flat)).sum()
    idx = torch.clamp((count - 1) // 2, min=0).reshape(1)
    return torch.gather(flat, 0, idx).reshape(())


@_register(aten.scatter_reduce.two)
def scatter_reduce(x: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str,
                   include_self: bool = True) -> Any:
    """sum / mean through scatter_add (lowers); other reductions are left alone."""
    if reduce not in ("sum", "mean") or not x.dtype.is_floating_point:
        return NotImplemented
    base = x if include_self else torch.scatter(x, dim, index, 0.0)
    total = torch.scatter_add(base, dim, index, src)
    if reduce == "sum":
        return total
    start = torch.ones_like(x) if include_self else torch.zeros_like(x)
    cnt = torch.scatter_add(start, dim, index, torch.ones_like(src))
    return torch.where(cnt > 0, total / torch.clamp(cnt, min=1), x)


# --------------------------------------------------------------------------- special functions
# The gamma family, error functions and Bessel I are in decomp_special.py.


@_register(aten.angle.default)
def angle(x: torch.Tensor) -> torch.Tensor:
    if x.is_complex():
        return NotImplemented
    x = x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())
    return torch.where(torch.isnan(x), x, torch.where(x < 0, math.pi, 0.0).to(x.dtype))


# --------------------------------------------------------------------------- fast paths
# nn.TransformerEncoderLayer's inference fast path (eval + no_grad) is one fused aten op
# with no decomposition in PyTorch; spelled out here as the layer's own Python path.
@_register(aten._transformer_encoder_layer_fwd.default)
def transformer_encoder_layer_fwd(
    src: torch.Tensor, embed_dim: int, num_heads: int, qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor, proj_weight: torch.Tensor, proj_bias: torch.Tensor,
    use_gelu: bool, norm_first: bool, eps: float, norm_weight_1: torch.Tensor,
    norm_bias_1: torch.Tensor, norm_weight_2: torch.Tensor, norm_bias_2: torch.Tensor,
    ffn_weight_1: torch.Tensor, ffn_bias_1: torch.Tensor, ffn_weight_2: torch.Tensor,
    ffn_bias_2: torch.Tensor, mask: torch.Tensor | None = None, mask_type: int | None = None,
) -> Any:
    import torch.nn.functional as F

    if mask is not None:
        return NotImplemented
    b, t, _ = src.shape
    head = embed_dim // num_heads

    def attention(h: torch.Tensor) -> torch.Tensor:
        q, k, v = F.linear(h, qkv_weight, qkv_bias).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, num_heads, head).transpose(1, 2) for z in (q, k, v))
        # math attention (SDPA would pick a CPU flash kernel tagged as random)
        weights = torch.softmax((q @ k.transpose(-2, -1)) * head**-0.5, dim=-1)
        out = weights @ v
        return F.linear(out.transpose(1, 2).reshape(b, t, embed_dim), proj_weight, proj_bias)

    def feed_forward(h: torch.Tensor) -> torch.Tensor:
        act = F.gelu if use_gelu else F.relu
        return F.linear(act(F.linear(h, ffn_weight_1, ffn_bias_1)), ffn_weight_2, ffn_bias_2)

    def ln1(h: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(h, (embed_dim,), norm_weight_1, norm_bias_1, eps)

    def ln2(h: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(h, (embed_dim,), norm_weight_2, norm_bias_2, eps)

    if norm_first:
        x = src + attention(ln1(src))
        return x + feed_forward(ln2(x))
    x = ln1(src + attention(src))
    return ln2(x + feed_forward(x))


def _float(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())


def _cheb(x: torch.Tensor, n: torch.Tensor | float, kind: str) -> torch.Tensor:
    """Chebyshev T/U/V/W from their trigonometric / hyperbolic closed forms (ATen uses the
    three-term recurrence, whose trip count is data: n is a tensor)."""
    x = _float(x)
    n = torch.trunc(torch.as_tensor(n, dtype=x.dtype, device=x.device))
    odd = torch.remainder(n, 2) == 1
    sgn = torch.where(odd & (x < 0), -1.0, 1.0)
    inside = torch.abs(x) < 1
    th = torch.acos(torch.clamp(x, -1 + 1e-7, 1 - 1e-7))
    t = torch.acosh(torch.where(inside, 2.0 + 0 * x, torch.abs(x)))
    if kind == "t":
        # ATen: cos(n acos x), unclamped (no division here needs the clamp)
        a, b = torch.cos(n * torch.acos(torch.where(inside, x, 0.0))), torch.cosh(n * t) * sgn
        edge = torch.where(x > 0, 1.0, torch.where(odd, -1.0, 1.0))
    elif kind == "u":
        a = torch.sin((n + 1) * th) / torch.sin(th)
        b = torch.sinh((n + 1) * t) / torch.sinh(t) * sgn
        edge = (n + 1) * torch.where(x > 0, 1.0, torch.where(odd, -1.0, 1.0))
    else:  # v, w: V_n(-x) = (-1)^n W_n(x)
        v = kind == "v"
        a = (torch.cos((n + 0.5) * th) / torch.cos(th / 2) if v
             else torch.sin((n + 0.5) * th) / torch.sin(th / 2))
        pos_v = torch.cosh((n + 0.5) * t) / torch.cosh(t / 2)
        pos_w = torch.sinh((n + 0.5) * t) / torch.sinh(t / 2)
        flip = torch.where(odd, -1.0, 1.0)
        b = torch.where(x > 0, pos_v if v else pos_w, flip * (pos_w if v else pos_v))
        one = torch.where(x > 0, 1.0 if v else 2 * n + 1, flip * ((2 * n + 1) if v else 1.0))
        edge = one + 0 * x
    out = torch.where(inside, a, torch.where(torch.abs(x) == 1, edge, b))
    return torch.where(n < 0, 0.0 * x, out)


for _kind in "tuvw":
    _op = getattr(aten, f"special_chebyshev_polynomial_{_kind}")
    _sop = getattr(aten, f"special_shifted_chebyshev_polynomial_{_kind}")
    OWN_DECOMPOSITIONS[_op.default] = lambda x, n, k=_kind: _cheb(x, n, k)
    OWN_DECOMPOSITIONS[_sop.default] = lambda x, n, k=_kind: _cheb(2 * _float(x) - 1, n, k)


# --------------------------------------------------------------------------- misc tensor ops


@_register(aten.unfold.default)
def unfold(x: torch.Tensor, dim: int, size: int, step: int) -> torch.Tensor:
    """Stacked strided slices (torch-mlir segfaults on its own unfold lowering)."""
    if x.dim() == 0:
        return x.reshape(1)
    dim = dim % x.dim()
    n = (x.shape[dim] - size) // step + 1
    parts = [x.narrow(dim, i, (n - 1) * step + 1)[(slice(None),) * dim + (slice(None, None, step),)]
             for i in range(size)]
    return torch.stack(parts, dim=-1)


OWN_DECOMPOSITIONS[aten.unfold_copy.default] = lambda x, d, s, st: unfold(x, d, s, st).clone()


def _cum_extreme(x: torch.Tensor, dim: int, larger: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """O(n^2) masked reduction; index = last position of the running extreme (ATen's >=),
    value = the element there (ATen's, bit for bit)."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    y = x.movedim(dim, -1)
    n = y.shape[-1]
    pos = torch.arange(n, device=x.device)
    keep = pos[None, :] <= pos[:, None]  # [i, j]: j <= i
    if x.dtype.is_floating_point:
        fill = -math.inf if larger else math.inf
    else:  # in x's dtype: a Python float fill made int64 compare in float (2**62 + 1 == 2**62)
        fill = torch.iinfo(x.dtype).min if larger else torch.iinfo(x.dtype).max
    a = torch.where(keep, y.unsqueeze(-2), torch.full((), fill, dtype=x.dtype, device=x.device))
    vals = a.amax(-1) if larger else a.amin(-1)
    hit = keep & ((a == vals.unsqueeze(-1)) | torch.isnan(a))
    idx = torch.where(hit, pos, -1).amax(-1)
    vals = torch.gather(y, -1, idx)  # the element at the index: a later 0.0 after -0.0, NaN
    return vals.movedim(-1, dim), idx.movedim(-1, dim)


OWN_DECOMPOSITIONS[aten.cummax.default] = lambda x, dim: _cum_extreme(x, dim, True)
OWN_DECOMPOSITIONS[aten.cummin.default] = lambda x, dim: _cum_extreme(x, dim, False)


@_register(aten.diagonal_scatter.default)
def diagonal_scatter(x: torch.Tensor, src: torch.Tensor, offset: int = 0, dim1: int = 0,
                     dim2: int = 1) -> torch.Tensor:
    xm = x.movedim((dim1, dim2), (-2, -1))
    r, c = xm.shape[-2], xm.shape[-1]
    rows = torch.arange(r, device=x.device)[:, None]
    cols = torch.arange(c, device=x.device)[None, :]
    mask = (cols - rows) == offset
    full = torch.diag_embed(src, offset, -2, -1)[..., :r, :c]
    full = aten.constant_pad_nd(full, [0, c - full.shape[-1], 0, r - full.shape[-2]], 0.0)
    return torch.where(mask, full, xm).movedim((-2, -1), (dim1, dim2))


@_register(aten.histc.default)
def histc(x: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:
    flat = _float(x).reshape(-1)
    # torch.full, not torch.tensor: under AOTAutograd's trace torch.tensor leaves a
    # lift_fresh_copy + detach_ that fails its functional-graph check
    lo, hi = (flat.min(), flat.max()) if min == max else (
        torch.full((), float(min), dtype=flat.dtype, device=x.device),
        torch.full((), float(max), dtype=flat.dtype, device=x.device))
    if min == max:
        same = lo == hi
        lo, hi = torch.where(same, lo - 1, lo), torch.where(same, hi + 1, hi)
    b = torch.floor((flat - lo) * bins / (hi - lo)).to(torch.int64)
    b = torch.where(flat == hi, bins - 1, b)
    inside = (flat >= lo) & (flat <= hi)
    onehot = (b[:, None] == torch.arange(bins, device=x.device)[None, :]) & inside[:, None]
    return onehot.to(flat.dtype).sum(0)


@_register(aten.searchsorted.Tensor)
def searchsorted(seq: torch.Tensor, values: torch.Tensor, *, out_int32: bool = False,
                 right: bool = False, side: str | None = None, sorter: Any = None) -> Any:
    """Count of sequence elements below each value (broadcast compare + sum)."""
    if sorter is not None:
        return NotImplemented
    right = right or side == "right"
    if seq.dim() == 1:
        s = seq.reshape((1,) * values.dim() + (-1,))
    else:
        s = seq.unsqueeze(-2)
    v = values.unsqueeze(-1)
    below = (s <= v) if right else (s < v)
    return below.sum(-1).to(torch.int32 if out_int32 else torch.int64)


@_register(aten.put.default)
def put(x: torch.Tensor, index: torch.Tensor, source: torch.Tensor, accumulate: bool = False
        ) -> torch.Tensor:
    flat = x.reshape(-1)
    idx = index.reshape(-1)
    idx = torch.where(idx < 0, idx + flat.numel(), idx)
    return aten.index_put(flat, [idx], source.reshape(-1), accumulate).reshape(x.shape)


@_register(aten.frexp.Tensor)
def frexp(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    ax = torch.abs(x)
    safe = torch.where((ax == 0) | ~torch.isfinite(ax), 1.0 + 0 * x, ax)
    e = torch.floor(torch.log2(safe)) + 1
    m = x / torch.pow(2.0, e)
    fix_hi, fix_lo = torch.abs(m) >= 1, (torch.abs(m) < 0.5) & (m != 0)
    e = torch.where(fix_hi, e + 1, torch.where(fix_lo, e - 1, e))
    m = torch.where(fix_hi, m / 2, torch.where(fix_lo, m * 2, m))
    m = torch.where(torch.isfinite(x), m, x)
    return m, torch.where((ax == 0) | ~torch.isfinite(x), 0, e.to(torch.int32))


@_register(aten._cdist_forward.default)
def cdist(x1: torch.Tensor, x2: torch.Tensor, p: float, compute_mode: Any = None) -> torch.Tensor:
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return torch.linalg.vector_norm(diff, ord=p, dim=-1)


@_register(aten._pdist_forward.default)
def pdist(x: torch.Tensor, p: float = 2.0) -> torch.Tensor:
    n = x.shape[0]
    i, j = torch.triu_indices(n, n, 1, device=x.device)
    return torch.linalg.vector_norm(x[i] - x[j], ord=p, dim=-1)


@_register(aten.nanmedian.dim)
def median_dim(x: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort (NaNs last), pick the lower middle; nanmedian counts only non-NaN entries."""
    if torch._guards.TracingContext.try_get() is not None:
        return NotImplemented  # kept whole while AOTAutograd traces: see decomp_tie_order
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    vals, idx = torch.sort(x, dim=dim)
    nan = torch.isnan(x) if x.dtype.is_floating_point else torch.zeros_like(x, dtype=torch.bool)
    count = (~nan).sum(dim, keepdim=True)
    k = torch.clamp((count - 1) // 2, min=0)
    v, i = torch.gather(vals, dim, k), torch.gather(idx, dim, k)
    return (v, i) if keepdim else (v.squeeze(dim), i.squeeze(dim))



@_register(aten.median.dim)
def median_dim_nan(x: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """median propagates NaN: with any NaN the answer is the first NaN (sorted last)."""
    if torch._guards.TracingContext.try_get() is not None:
        return NotImplemented  # kept whole while AOTAutograd traces: see decomp_tie_order
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    vals, idx = torch.sort(x, dim=dim)
    n = x.shape[dim]
    nan = torch.isnan(x) if x.dtype.is_floating_point else torch.zeros_like(x, dtype=torch.bool)
    count = (~nan).sum(dim, keepdim=True)
    k = torch.where(count < n, count, torch.full_like(count, (n - 1) // 2))
    v, i = torch.gather(vals, dim, k), torch.gather(idx, dim, k)
    return (v, i) if keepdim else (v.squeeze(dim), i.squeeze(dim))


# --------------------------------------------------------------------------- small dense linalg
# Unrolled for a static n (<= 32): O(n) row steps of vector work; enough for the
# covariance-sized matrices that appear inside models. Larger n stays an eager op.
_MAX_UNROLL = 32


def _tri_solve(a: torch.Tensor, b: torch.Tensor, upper: bool, unit: bool = False) -> torch.Tensor:
    """Solve A X = B for triangular A (..., n, n), B (..., n, k) by substitution."""
    n = a.shape[-1]
    if n == 0:
        return b.clone()
    a = a.expand(*torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]), n, n)
    rows: list[torch.Tensor | None] = [None] * n
    order = range(n - 1, -1, -1) if upper else range(n)
    for i in order:
        acc = b[..., i, :]
        done = list(range(i + 1, n) if upper else range(i))
        if done:
            xs = torch.stack([rows[j] for j in done], dim=-2)  # type: ignore[misc]
            acc = acc - (a[..., i, done].unsqueeze(-2) @ xs).squeeze(-2)
        rows[i] = acc if unit else acc / a[..., i, i : i + 1]
    return torch.stack(rows, dim=-2)  # type: ignore[arg-type]


def _cholesky(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, info) as LAPACK's potf2 leaves them: column j's pivot a_jj - |L[j, :j]|^2 must
    be positive (and not NaN); at the first one that is not, that value is stored on the
    diagonal, info = j + 1, and every later column keeps the input's values. The strict
    upper triangle is zero (ATen's tril_)."""
    n = a.shape[-1]
    info = torch.zeros(a.shape[:-2], dtype=torch.int32, device=a.device)
    if n == 0:
        return a.clone(), info
    rows = torch.arange(n, device=a.device)
    failed = torch.zeros(a.shape[:-2], dtype=torch.bool, device=a.device)
    cols: list[torch.Tensor] = []
    for j in range(n):
        prev = torch.stack(cols, dim=-1) if cols else None  # (..., n, j)
        diag = a[..., j, j]
        below = a[..., :, j]
        if prev is not None:
            diag = diag - (prev[..., j, :] ** 2).sum(-1)
            below = below - (prev @ prev[..., j, :].unsqueeze(-1)).squeeze(-1)
        ok = (diag > 0) & ~failed
        d = torch.sqrt(torch.where(ok, diag, 1.0))
        done = torch.where((rows > j) & ok.unsqueeze(-1), below / d.unsqueeze(-1), torch.zeros_like(below))
        done = torch.where(rows == j, d.unsqueeze(-1), done)
        kept = torch.where(rows > j, a[..., :, j], torch.zeros_like(below))  # untouched input column
        kept = torch.where((rows == j) & ~failed.unsqueeze(-1), diag.unsqueeze(-1),
                           torch.where(rows == j, a[..., :, j], kept))
        cols.append(torch.where(ok.unsqueeze(-1), done, kept))
        info = torch.where(~failed & ~ok, j + 1, info)
        failed = failed | ~ok
    return torch.stack(cols, dim=-1), info


def _small(a: torch.Tensor) -> bool:
    return a.dim() >= 2 and a.shape[-1] <= _MAX_UNROLL and a.dtype.is_floating_point


def _cholesky_ex(a: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    # upper reads only the upper triangle, as LAPACK does (the lower one may be anything)
    if upper:
        low, info = _cholesky(a.transpose(-2, -1))
        return low.transpose(-2, -1), info
    return _cholesky(a)


@_register(aten.cholesky.default)
def cholesky(a: torch.Tensor, upper: bool = False) -> Any:
    """Raises like eager on a matrix that is not positive definite: the check on info is
    lifted out of the graph by prepare and runs after the executable."""
    if not _small(a):
        return NotImplemented
    low, info = _cholesky_ex(a, upper)
    aten._linalg_check_errors(info, "cholesky", is_matrix=a.dim() == 2)
    return low


@_register(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(a: torch.Tensor, upper: bool = False, check_errors: bool = False) -> Any:
    """info as LAPACK reports it (first failing column, 1-based); with ``check_errors`` the
    check is traced as its own op (lifted out of the graph by prepare)."""
    if not _small(a):
        return NotImplemented
    low, info = _cholesky_ex(a, upper)
    if check_errors:
        aten._linalg_check_errors(info, "linalg.cholesky_ex", is_matrix=a.dim() == 2)
    return low, info


@_register(aten.cholesky_solve.default)
def cholesky_solve(b: torch.Tensor, l: torch.Tensor, upper: bool = False) -> Any:  # noqa: E741
    if not _small(l):
        return NotImplemented
    low = l.transpose(-2, -1) if upper else l
    y = _tri_solve(low, b, upper=False)
    return _tri_solve(low.transpose(-2, -1), y, upper=True)


@_register(aten.cholesky_inverse.default)
def cholesky_inverse(l: torch.Tensor, upper: bool = False) -> Any:  # noqa: E741
    if not _small(l):
        return NotImplemented
    eye = torch.eye(l.shape[-1], dtype=l.dtype, device=l.device).expand(l.shape)
    return cholesky_solve(eye, l, upper)


@_register(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(a: torch.Tensor, b: torch.Tensor, *, upper: bool, left: bool = True,
                            unitriangular: bool = False) -> Any:
    if not _small(a):
        return NotImplemented
    if left:
        return _tri_solve(a, b, upper, unitriangular)
    return _tri_solve(a.transpose(-2, -1), b.transpose(-2, -1), not upper,
                      unitriangular).transpose(-2, -1)


@_register(aten.triangular_solve.default)
def triangular_solve(b: torch.Tensor, a: torch.Tensor, upper: bool = True, transpose: bool = False,
                     unitriangular: bool = False) -> Any:
    if not _small(a):
        return NotImplemented
    m = a.transpose(-2, -1) if transpose else a
    return _tri_solve(m, b, upper != transpose, unitriangular), a.clone()
