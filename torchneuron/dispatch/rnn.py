"""The fused LSTM and GRU cell kernels, which PyTorch has for CUDA but not for the CPU.

Why: ``nn.LSTM``, ``nn.GRU``, ``nn.LSTMCell`` and ``nn.GRUCell`` are composite ops that,
for CUDA, XPU and PrivateUse1 tensors, do the two gate matmuls as ordinary ops and hand
the gate activations to one fused elementwise kernel (``_thnn_fused_lstm_cell``,
``_thnn_fused_gru_cell``) whose backward is fused too. Those kernels have no CPU
implementation, so the device cannot run them on its buffers with the CPU kernel.
Here they are written with CPU ops on the buffers; dispatch runs each as *one* eager
kernel on the device (the matmuls around it are ordinary device ops), as the real
device would run a fused cell.

The workspace layout is CUDA's, so the fused backward and PyTorch's differentiable
backward (used under ``create_graph=True``) agree: LSTM keeps the activated gates
``[i, f, g, o]``; GRU keeps ``[r, z, n, hx, hn]`` (reset, update and new gates, the
previous hidden state, and the hidden part of the new gate before the reset).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

__all__ = ["FUSED_CELL_KERNELS"]

aten = torch.ops.aten


def _lstm_cell(
    input_gates: Tensor, hidden_gates: Tensor, cx: Tensor,
    input_bias: Tensor | None = None, hidden_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def _lstm_cell_backward(
    grad_hy: Tensor | None, grad_cy: Tensor | None, cx: Tensor, cy: Tensor,
    workspace: Tensor, has_bias: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:  # fmt: skip
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    if grad_hy is None:
        grad_hy = torch.zeros_like(cy)
    grad_c = grad_hy * o * (1 - tanh_cy * tanh_cy)
    if grad_cy is not None:
        grad_c = grad_c + grad_cy
    grad_gates = torch.cat(
        [
            grad_c * g * i * (1 - i),
            grad_c * cx * f * (1 - f),
            grad_c * i * (1 - g * g),
            grad_hy * tanh_cy * o * (1 - o),
        ],
        1,
    )
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


def _gru_cell(
    input_gates: Tensor, hidden_gates: Tensor, hx: Tensor,
    input_bias: Tensor | None = None, hidden_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    ir, iz, in_ = input_gates.chunk(3, 1)
    hr, hz, hn = hidden_gates.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = (hx - n) * z + n
    return hy, torch.cat([r, z, n, hx, hn], 1)


def _gru_cell_backward(
    grad_hy: Tensor, workspace: Tensor, has_bias: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * hn * r * (1 - r)
    grad_input_gates = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden_gates = torch.cat([grad_r, grad_z, grad_n * r], 1)
    if has_bias:
        return (grad_input_gates, grad_hidden_gates, grad_hy * z,
                grad_input_gates.sum(0), grad_hidden_gates.sum(0))  # fmt: skip
    return grad_input_gates, grad_hidden_gates, grad_hy * z, None, None


# aten overload -> implementation over CPU buffers (each runs as one device kernel)
FUSED_CELL_KERNELS: dict[Any, Callable[..., Any]] = {
    aten._thnn_fused_lstm_cell.default: _lstm_cell,
    aten._thnn_fused_lstm_cell_backward_impl.default: _lstm_cell_backward,
    aten._thnn_fused_gru_cell.default: _gru_cell,
    aten._thnn_fused_gru_cell_backward.default: _gru_cell_backward,
}
