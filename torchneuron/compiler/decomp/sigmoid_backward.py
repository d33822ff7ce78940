"""``sigmoid_backward`` in the order ATen's CPU kernel multiplies.

Why: every ``nn.Sigmoid`` and every GRU cell's backward (``dispatch/recurrent.py``: its
reset and update gates) calls it, and PyTorch's own decomposition computes
``grad * (y * (1 - y))`` while ATen's kernel (BinaryOpsKernel.cpp) computes
``grad * (1 - y) * y``, left to right: the two round differently in the last bit (a
replayed GRU training step drifted 1.5e-08 from eager in its weights). The kernel's
formula has no product added to anything, so no build fuses a step of it; still, it is
used only where samples of ATen's scalar loop and of its vector body show this CPU's
eager gives its bits (a ``host_numerics`` premise), else the op is refused
(``cpu-dependent-premise``). Half and bfloat16 compute in float32 (the opmath type), as
the kernel does. Complex inputs keep PyTorch's decomposition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.host_numerics import (
    refuse_unless_premise,
    register_premise,
    sample,
)
from torchneuron.compiler.decomp.registry import registrar

__all__ = ["SIGMOID_BACKWARD_DECOMPOSITIONS"]

aten = torch.ops.aten
SIGMOID_BACKWARD_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(SIGMOID_BACKWARD_DECOMPOSITIONS)
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_NAME = "aten.sigmoid_backward"


def _sigmoid_backward(grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Eager's formula on opmath operands: ``(grad * (1 - y)) * y``."""
    return grad * (1 - y) * y


@_register(aten.sigmoid_backward.default)
def sigmoid_backward(grad: Any, y: Any) -> Any:
    if not isinstance(grad, torch.Tensor) or grad.dtype not in _FLOATS \
            or y.dtype != grad.dtype:
        return NotImplemented
    dtype = grad.dtype
    if not refuse_unless_premise(_NAME, dtype):
        return NotImplemented
    opmath = torch.float64 if dtype == torch.float64 else torch.float32
    return _sigmoid_backward(grad.to(opmath), y.to(opmath)).to(dtype)


# 15 elements: ATen's scalar loop alone at every vector width; 64: its vector body alone
_SIZES = (15, 64)


def _operands(dtype: torch.dtype, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    grad = sample((n,), 41, 2.0).to(dtype)
    y = sample((n,), 42, 4.0).sigmoid().to(dtype)
    return grad, y


def _eager(dtype: torch.dtype) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: tuple(aten.sigmoid_backward(*_operands(dtype, n)) for n in _SIZES)


def _ours(dtype: torch.dtype) -> Callable[[], tuple[torch.Tensor, ...]]:
    opmath = torch.float64 if dtype == torch.float64 else torch.float32

    def run() -> tuple[torch.Tensor, ...]:
        return tuple(_sigmoid_backward(*(t.to(opmath) for t in _operands(dtype, n)))
                     .to(dtype) for n in _SIZES)

    return run


for _dtype in _FLOATS:
    register_premise(_NAME, _dtype, _eager(_dtype), _ours(_dtype))
