"""Linear resampling (``F.interpolate`` linear / bilinear / trilinear) with eager's NaN and inf.

ATen's CPU kernel gathers the two neighbours along each dimension and sums their
weighted values, ``t0 * w0 + t1 * w1`` with ``w0 = 1 - w1``, innermost dimension first.
PyTorch's decomposition (which this replaces for float32 and float64) wrote the same
interpolation as ``t0 + (t1 - t0) * w1``: equal for finite values, but an infinity met
with weight 0 gives NaN in eager (``inf * 0``) and not in the lerp form, and two
infinities of opposite sign give NaN in the lerp form where eager keeps one: a (1, 1, 2,
4) input holding inf and -inf resized with ``align_corners=True`` had NaN and inf in
other places than eager's. When an output size equals the input size eager still
weights (index i with weight 1, its right neighbour with weight 0), so an infinity
next to a copied element turns it into NaN as well, and so it does here.

Weights as ATen computes them, in the input's precision: the scale ``(in - 1) / (out -
1)`` (align_corners) or ``1 / scale_factor`` or ``in / out``, the source index ``scale
* i`` or ``max(scale * (i + 0.5) - 0.5, 0)``, its floor (clamped to the last index) and
``w1 = clamp(src - floor, 0, 1)``. float16 and bfloat16 inputs are refused
(``decomp.refusals.cpu_dependent``: eager's bits differ between CPU code paths); integer inputs
keep PyTorch's entry.

These ops never reached a decomposition table: PyTorch registers Python kernels for
their Autograd and CompositeImplicitAutograd keys, which the Python dispatcher (on in
prepare's trace and in AOTAutograd's) runs before the table is consulted.
``eager_resample_kernels()`` swaps those kernels, while a trace runs, for one that takes
float32 / float64 linear resizes here, leaves float32 / float64 bicubic and integer inputs
to PyTorch's kernel, and sends float16 / bfloat16 inputs down to the op itself (an
autograd function whose backward is the op's own backward), where the table refuses them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch._C import DispatchKey

from torchneuron.compiler.decomp import autograd_kernels
from torchneuron.compiler.decomp.registry import registrar
from torchneuron.compiler.decomp.resample import area_pixel_scale
from torchneuron.compiler.prepare.trace_lock import TRACE_LOCK

__all__ = ["UPSAMPLE_LINEAR_DECOMPOSITIONS", "eager_resample_kernels"]

aten = torch.ops.aten
UPSAMPLE_LINEAR_DECOMPOSITIONS: dict[Any, Any] = {}
_register = registrar(UPSAMPLE_LINEAR_DECOMPOSITIONS)


def _taps(in_size: int, out_size: int, align_corners: bool, scale: float | None,
          dtype: torch.dtype, device: torch.device
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(index0, index1, weight0, weight1) of every output position, as ATen's
    ``compute_source_index_and_lambda``."""
    i = torch.arange(out_size, device=device)
    if in_size == out_size:
        w1 = torch.zeros(out_size, dtype=dtype, device=device)
        return i, i, torch.ones(out_size, dtype=dtype, device=device), w1
    ratio = area_pixel_scale(in_size, out_size, align_corners, scale)
    pos = i.to(dtype)
    src = pos * ratio if align_corners else (pos + 0.5) * ratio - 0.5
    if not align_corners:
        src = torch.clamp(src, min=0.0)
    i0 = torch.clamp(torch.floor(src).to(torch.int64), max=in_size - 1)
    w1 = torch.clamp(src - i0.to(dtype), 0.0, 1.0)
    i1 = i0 + (i0 < in_size - 1).to(torch.int64)
    return i0, i1, 1.0 - w1, w1


def _linear(x: torch.Tensor, output_size: Sequence[int], align_corners: bool,
            scales: Sequence[float | None]) -> Any:
    if x.dtype not in (torch.float32, torch.float64) or x.numel() == 0:
        return NotImplemented
    nd = len(output_size)
    taps = [_taps(x.shape[2 + d], int(output_size[d]), align_corners, scales[d], x.dtype,
                  x.device) for d in range(nd)]
    # innermost dimension first: each step combines two gathers along one dimension
    y = x
    for d in reversed(range(nd)):
        i0, i1, w0, w1 = taps[d]
        view = [-1] + [1] * (nd - 1 - d)
        dim = 2 + d
        t0 = torch.index_select(y, dim, i0)
        t1 = torch.index_select(y, dim, i1)
        y = t0 * w0.reshape(view) + t1 * w1.reshape(view)
    return y.contiguous(memory_format=torch.contiguous_format)


def _scales_of(scale_factors: Sequence[float] | None, nd: int) -> list[float | None]:
    return list(scale_factors) if scale_factors else [None] * nd


def _out_size(x: torch.Tensor, output_size: Sequence[int] | None,
              scale_factors: Sequence[float] | None) -> list[int]:
    if output_size is not None:
        return list(output_size)
    assert scale_factors is not None
    return [math.floor(x.shape[2 + d] * s) for d, s in enumerate(scale_factors)]


@_register(aten.upsample_linear1d.default)
def upsample_linear1d(x: torch.Tensor, output_size: Sequence[int], align_corners: bool,
                      scales_w: float | None = None) -> Any:
    return _linear(x, output_size, align_corners, [scales_w])


@_register(aten.upsample_bilinear2d.default)
def upsample_bilinear2d(x: torch.Tensor, output_size: Sequence[int], align_corners: bool,
                        scales_h: float | None = None, scales_w: float | None = None) -> Any:
    return _linear(x, output_size, align_corners, [scales_h, scales_w])


@_register(aten.upsample_trilinear3d.default)
def upsample_trilinear3d(x: torch.Tensor, output_size: Sequence[int], align_corners: bool,
                         scales_d: float | None = None, scales_h: float | None = None,
                         scales_w: float | None = None) -> Any:
    return _linear(x, output_size, align_corners, [scales_d, scales_h, scales_w])


@_register(aten.upsample_linear1d.vec, aten.upsample_bilinear2d.vec,
           aten.upsample_trilinear3d.vec)
def upsample_linear_vec(x: torch.Tensor, output_size: Sequence[int] | None,
                        align_corners: bool, scale_factors: Sequence[float] | None) -> Any:
    nd = x.dim() - 2
    return _linear(x, _out_size(x, output_size, scale_factors), align_corners,
                   _scales_of(scale_factors, nd))


# ------------------------------------------------------------- Python kernels, swapped

_DEFAULTS = {  # .vec and .default overloads -> (the .default op, its backward, dims, linear)
    aten.upsample_linear1d: (aten.upsample_linear1d_backward.default, 1, True),
    aten.upsample_bilinear2d: (aten.upsample_bilinear2d_backward.default, 2, True),
    aten.upsample_trilinear3d: (aten.upsample_trilinear3d_backward.default, 3, True),
    aten.upsample_bicubic2d: (aten.upsample_bicubic2d_backward.default, 2, False),
}
_KEYS = (DispatchKey.Autograd, DispatchKey.CompositeImplicitAutograd)


class _Undecomposed(torch.autograd.Function):
    """The op as a node (so the table sees it), differentiated by its own backward op."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, op: Any, backward: Any, size: list[int],
                align_corners: bool, scales: list[float | None]) -> torch.Tensor:
        ctx.saved = (backward, size, list(x.shape), align_corners, scales)
        with torch._C._AutoDispatchBelowAutograd():  # not this kernel again
            return op(x, size, align_corners, *scales)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        backward, size, in_size, align_corners, scales = ctx.saved
        return backward(grad, size, in_size, align_corners, *scales), None, None, None, \
            None, None


def _kernel(packet: Any, vec: bool, original: Callable[..., Any]) -> Callable[..., Any]:
    backward, nd, linear = _DEFAULTS[packet]

    def kernel(x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if kwargs or not isinstance(x, torch.Tensor) or x.dim() != nd + 2:
            return original(x, *args, **kwargs)
        if vec:
            output_size, align_corners, factors = (list(args) + [None])[:3]
            size = _out_size(x, output_size, factors)
            scales = _scales_of(factors, nd)
        else:
            size, align_corners = list(args[0]), args[1]
            scales = (list(args[2:]) + [None] * nd)[:nd]
        if x.dtype in (torch.float32, torch.float64):
            if linear:
                return _linear(x, size, align_corners, scales)
            return original(x, *args, **kwargs)
        if not x.is_floating_point():
            return original(x, *args, **kwargs)
        return _Undecomposed.apply(x, packet.default, backward, size, align_corners, scales)

    return kernel


_depth = [0]  # nesting of eager_resample_kernels (under TRACE_LOCK)


@contextlib.contextmanager
def eager_resample_kernels() -> Iterator[None]:
    """While a trace runs: the resampling ops' Python kernels are ours (see above), and
    the ops of ``decomp.autograd_kernels`` have none.
    Holds ``TRACE_LOCK`` (the kernels are process-wide, so no other torchneuron trace may
    see them half swapped); re-entrant, since prepare runs inside AOTAutograd's compile."""
    with TRACE_LOCK:
        if _depth[0]:
            _depth[0] += 1
            try:
                yield
            finally:
                _depth[0] -= 1
            return
        with _swapped():
            yield


@contextlib.contextmanager
def _swapped() -> Iterator[None]:
    saved: list[tuple[Any, Any, Callable[..., Any]]] = []
    for packet in _DEFAULTS:
        for name in ("vec", "default"):
            op = getattr(packet, name)
            for key in _KEYS:
                if key in op.py_kernels:
                    saved.append((op, key, op.py_kernels[key]))
                    op.py_kernels[key] = _kernel(packet, name == "vec", op.py_kernels[key])
            op._dispatch_cache.clear()
    _depth[0] = 1
    try:
        with autograd_kernels.undecomposed():  # softshrink's, likewise (its own module)
            yield
    finally:
        _depth[0] = 0
        for op, key, fn in saved:
            op.py_kernels[key] = fn
            op._dispatch_cache.clear()
