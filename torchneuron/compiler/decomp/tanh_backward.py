"""``tanh_backward`` in the form ATen's CPU kernel computes it on the CPU that runs it.

Why: every ``nn.Tanh`` (and RNN/LSTM/GRU cell) backward calls it, so a compiled gradient
that misses eager's last bit puts every replayed training step off eager's. ATen's kernel
(BinaryOpsKernel.cpp) computes ``grad * (1 - y * y)`` in the dtype's opmath type (float32
for float16 / bfloat16). The AVX2 (and wider) build lets the compiler contract
``1 - y * y`` into one fused multiply-add; the ``default`` build cannot (measured: 285 of
1003 random float32 elements differed from the unfused form on AVX2). So both forms are
written here, each used only where samples of ATen's scalar loop and of its vector body
show this CPU's eager computes it (``host_numerics`` premises); otherwise the op is
refused (``cpu-dependent-premise``). float64 has no wider type to emulate a fused step
in: only the unfused form, under its premise. Complex inputs keep PyTorch's
decomposition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.foreach import _fma32
from torchneuron.compiler.decomp.host_numerics import (
    multiply_add_form,
    register_multiply_add,
    sample,
)
from torchneuron.compiler.decomp.registry import registrar

__all__ = ["TANH_BACKWARD_DECOMPOSITIONS"]

aten = torch.ops.aten
TANH_BACKWARD_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(TANH_BACKWARD_DECOMPOSITIONS)
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _tanh_backward(grad: torch.Tensor, y: torch.Tensor, fused: bool) -> torch.Tensor:
    """Eager's formula on opmath operands."""
    if fused:
        return grad * _fma32(-y, y, torch.ones_like(y))
    return grad * (1 - y * y)


@_register(aten.tanh_backward.default)
def tanh_backward(grad: Any, y: Any) -> Any:
    if not isinstance(grad, torch.Tensor) or grad.dtype not in _FLOATS \
            or y.dtype != grad.dtype:
        return NotImplemented
    dtype = grad.dtype
    fused = multiply_add_form("aten.tanh_backward", dtype)
    if fused is None:
        return NotImplemented
    opmath = torch.float64 if dtype == torch.float64 else torch.float32
    return _tanh_backward(grad.to(opmath), y.to(opmath), fused).to(dtype)


# 15 elements: ATen's scalar loop alone at every vector width; 64: its vector body alone
_SIZES = (15, 64)


def _operands(dtype: torch.dtype, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    grad = sample((n,), 31, 2.0).to(dtype)
    y = sample((n,), 32, 1.0).tanh().to(dtype)
    return grad, y


def _eager(dtype: torch.dtype) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: tuple(aten.tanh_backward(*_operands(dtype, n)) for n in _SIZES)


def _ours(dtype: torch.dtype, fused: bool) -> Callable[[], tuple[torch.Tensor, ...]]:
    opmath = torch.float64 if dtype == torch.float64 else torch.float32

    def run() -> tuple[torch.Tensor, ...]:
        return tuple(_tanh_backward(*(t.to(opmath) for t in _operands(dtype, n)), fused)
                     .to(dtype) for n in _SIZES)

    return run


register_multiply_add("aten.tanh_backward", _FLOATS, _eager, _ours)
