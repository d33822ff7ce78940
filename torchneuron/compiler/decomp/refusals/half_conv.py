"""float16 / bfloat16 convolutions are refused: eager's bits depend on the CPU.

Eager's CPU convolution of reduced-precision tensors takes a different kernel on each
machine: oneDNN's when the CPU has the instructions for the type (AVX-512 with BF16 /
FP16), ATen's own im2col + gemm otherwise, and a third path for transposed convolutions
(measured on one AMD EPYC: float16 ``conv2d``'s bits differ between
``ATEN_CPU_CAPABILITY=default`` and ``avx2``; a float16 ``conv_transpose2d`` differs from
the float32 convolution rounded once in 378 of 882 elements, and on an AVX-512 EPYC
``conv2d`` differs from it in 3 of 1620). No single lowering gives every machine's
answer, so a graph holding one runs eagerly (reason ``half-conv``): eager's own kernel
computes it, with eager's bits on whatever CPU this is. Adaptive eager learns the op and
runs it between regions (``adaptive_eager/refused.py``), so the rest of a step still
compiles. float32 and float64 convolutions keep their lowering.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.errors import PrepareError

__all__ = ["half_conv_decompositions"]

aten = torch.ops.aten
_HALVES = (torch.float16, torch.bfloat16)


def _refuse(op: Any, base: Callable[..., Any] | None) -> Callable[..., Any]:
    def convolution(*args: Any, **kwargs: Any) -> Any:
        if any(isinstance(a, torch.Tensor) and a.dtype in _HALVES for a in args[:3]):
            if torch._guards.TracingContext.try_get() is not None:
                return NotImplemented  # AOTAutograd's trace: prepare's own trace refuses
            raise PrepareError(
                f"{op}: eager's {args[0].dtype} convolution takes a different kernel on "
                "each CPU (oneDNN's or ATen's, by instruction set), so no lowering gives "
                "its bits everywhere; this graph runs eagerly. Convolve in float32 for a "
                "compiled convolution.", op=f"aten.{op._opname}", reason="half-conv")
        return base(*args, **kwargs) if base is not None else NotImplemented

    return convolution


def half_conv_decompositions(base: dict[Any, Callable[..., Any]]
                             ) -> dict[Any, Callable[..., Any]]:
    """Entries wrapping ``base``'s (the table built so far): other dtypes keep them."""
    ops = (aten.convolution.default, aten.convolution_backward.default)
    return {op: _refuse(op, base.get(op)) for op in ops}
