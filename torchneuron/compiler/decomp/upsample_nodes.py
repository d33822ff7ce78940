"""Linear and bicubic resizes (``F.interpolate``) stay whole in a traced graph: eager's kernel.

Why: ATen's CPU resize kernels take other loops on each CPU code path: a float32
bilinear resize of a (2, 3, 5, 6) input to (7, 9) compiled from a decomposition
(ATen's taps and weights, ``t0 * w0 + t1 * w1``, innermost dimension first) differed
from eager in 186 of 378 elements, a trilinear one in 754 of 1386, a bicubic one in 317
of 378, and float64 alike; eager's own half-precision bits differ between
``ATEN_CPU_CAPABILITY=default`` and ``avx2``. No decomposition gives eager's bits on
every CPU, so every floating-point linear (1-, 2- and 3-D) and bicubic resize, forward
and backward, is a node of its own that ``decomp.eager_kernels`` carries into the program
as a call of eager's kernel (NaN and inf included: ``inf * 0`` where eager meets one).

These ops never reach a decomposition table on their own: PyTorch registers Python
kernels for their Autograd and CompositeImplicitAutograd keys, which the Python
dispatcher (on in prepare's trace and in AOTAutograd's) runs before the table is
consulted, and which decompose them. ``eager_resample_kernels()`` swaps those kernels,
while a trace runs, for one that sends a floating-point input down to the op itself (an
autograd function whose backward is the op's own backward op); integer inputs keep
PyTorch's kernel.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch._C import DispatchKey

from torchneuron.compiler.decomp import autograd_kernels
from torchneuron.compiler.prepare.trace_lock import TRACE_LOCK

__all__ = ["eager_resample_kernels"]

aten = torch.ops.aten


def _scales_of(scale_factors: Sequence[float] | None, nd: int) -> list[float | None]:
    return list(scale_factors) if scale_factors else [None] * nd


def _out_size(x: torch.Tensor, output_size: Sequence[int] | None,
              scale_factors: Sequence[float] | None) -> list[int]:
    if output_size is not None:
        return list(output_size)
    assert scale_factors is not None
    return [math.floor(x.shape[2 + d] * s) for d, s in enumerate(scale_factors)]


_DEFAULTS = {  # .vec and .default overloads -> (their backward, dims)
    aten.upsample_linear1d: (aten.upsample_linear1d_backward.default, 1),
    aten.upsample_bilinear2d: (aten.upsample_bilinear2d_backward.default, 2),
    aten.upsample_trilinear3d: (aten.upsample_trilinear3d_backward.default, 3),
    aten.upsample_bicubic2d: (aten.upsample_bicubic2d_backward.default, 2),
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
    backward, nd = _DEFAULTS[packet]

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
