"""Max and average pooling over windows, as strided slices of the padded input.

This torch-mlir cannot lower ``max_pool2d_with_indices`` and its backward; these spell
the windows out as one strided view per kernel offset (no gather, no window op), with
ATen's index (the first maximum, a NaN over anything) and ATen's divisors.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["POOL_WINDOW_DECOMPOSITIONS"]

aten = torch.ops.aten
POOL_WINDOW_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(POOL_WINDOW_DECOMPOSITIONS)


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
