"""MXFP8 training of ``nn.Linear`` layers on trn3, as TorchAO's ``MXFP8Linear`` does it.

``convert_to_mxfp8(model)`` swaps every ``nn.Linear`` for an ``MXFP8Linear`` sharing its
parameters. Its forward and both backward matmuls quantize their operands to MXFP8 along
the contraction dimension (32-element E8M0 scale groups) and multiply on TensorE at the
MX rate through ``mxfp8_matmul_kernel``; accumulation is fp32, results in the input dtype.
The bias is added by PyTorch (an ordinary device op).

The operands' transposes into the kernel's ``[K, M]`` / ``[K, N]`` layout run on the host
inside the op (PyTorch on the buffers, uncharged).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torchneuron.nki.op import nki_op

from .mx import mxfp8_matmul_kernel

__all__ = ["MXFP8Linear", "convert_to_mxfp8", "mxfp8_linear"]


def _mm(a_t: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a_t.T @ b`` in MXFP8 (a_t [K, M], b [K, N])."""
    return mxfp8_matmul_kernel(a_t.contiguous(), b.contiguous())


def _linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return _mm(x.t(), weight.t())


def _linear_fake(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], weight.shape[0])


def _grads(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor]:
    grad = grad.to(x.dtype)
    return _mm(grad.t(), weight), _mm(grad, x)


def _grads_fake(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(weight)


_linear_op = nki_op("nki_lib::mxfp8_linear", _linear, fake=_linear_fake)
_grads_op = nki_op("nki_lib::mxfp8_linear_backward", _grads, fake=_grads_fake)


def _setup(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, weight = ctx.saved_tensors
    return _grads_op(grad, x, weight)


_linear_op.register_autograd(_backward, setup_context=_setup)


def mxfp8_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
                 ) -> torch.Tensor:
    """``F.linear`` with MXFP8 matmuls (forward and backward): x [..., in], weight [out, in];
    ``in`` and the token count multiples of 32, tokens <= 128 or a multiple of 128, ``out``
    <= 512 or a multiple of 512."""
    y = _linear_op(x.reshape(-1, x.shape[-1]), weight).reshape(*x.shape[:-1], weight.shape[0])
    return y + bias if bias is not None else y


class MXFP8Linear(nn.Linear):
    """An ``nn.Linear`` whose matmuls run in MXFP8 (see module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mxfp8_linear(x, self.weight, self.bias)


def convert_to_mxfp8(model: nn.Module) -> nn.Module:
    """Swap every ``nn.Linear`` of ``model`` (in place) for an ``MXFP8Linear`` sharing its
    parameters; return the model."""
    for name, child in list(model.named_children()):
        if type(child) is nn.Linear:
            new = MXFP8Linear.__new__(MXFP8Linear)
            new.__dict__.update(child.__dict__)
            setattr(model, name, new)
        else:
            convert_to_mxfp8(child)
    return model


