"""The work of one LSTM layer over a whole sequence as one NeuronCore kernel.

Why its own model: ``mkldnn_rnn_layer`` (and its backward) is one kernel for T time
steps, which the generic rules (vector work over the outputs) would cost as one
elementwise pass. A Trainium LSTM layer runs the input projection of every step as one
matmul on TensorE, then a recurrence of T dependent steps: each a (B, H) x (H, 4H)
matmul on TensorE, the gate activations on ScalarE and the gate arithmetic on VectorE.
The steps cannot overlap (each needs the previous hidden state), so a step costs its
instructions' fixed overheads however small the batch: the count below gives the
engines one instruction per gate operation per step, which ``cost.kernel_cost`` charges
at least its minimum initiation interval each.

Per step and batch row, with H the hidden size (the figures are this module's
assumptions, written from the LSTM's equations):

- forward: ScalarE takes sigmoid of i, f, o, tanh of g and of c (5H element-ops, 4
  instructions: i and f are adjacent); VectorE adds the two projections and the bias
  (8H), forms ``c = f*c + i*g`` (3H) and ``h = o*tanh(c)`` (H): 12H in 5 instructions.
- backward: the gate gradients from the saved gates (about 25H element-ops on VectorE
  in 14 instructions, ``tanh(c)`` again on ScalarE), and matmuls for the input's, the
  previous hidden state's and both weights' gradients.

HBM traffic: the tensors read and written, except oneDNN's workspace, whose size is an
implementation detail of the host CPU's oneDNN; in its place the forward writes (and
the backward reads) the activated gates and cell states a Trainium kernel would save,
5H per step and row, so the simulated time is the same on every host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .cost import KernelWork

__all__ = ["RNN_LAYER_OPS", "rnn_layer_work"]

RNN_LAYER_OPS = frozenset({"mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"})

_FWD_SCALAR, _FWD_VECTOR, _FWD_INSTRUCTIONS = 5, 12, 9
_BWD_SCALAR, _BWD_VECTOR, _BWD_INSTRUCTIONS = 1, 25, 15


def _bytes(ts: Sequence[Any]) -> int:
    """Bytes of the tensors but the workspace, broadcast (stride-0) dims counted once."""
    total = 0
    for t in ts:
        if isinstance(t, torch.Tensor) and t.dtype != torch.uint8 and t.numel():
            n = 1
            for size, stride in zip(t.shape, t.stride(), strict=True):
                n *= size if stride else 1
            total += n * t.element_size()
    return total


def rnn_layer_work(name: str, args: Sequence[Any], outs: Sequence[torch.Tensor],
                   dtype: str) -> KernelWork:
    """Work of ``mkldnn_rnn_layer`` or its backward called with ``args`` (time-major
    input (T, B, I), weights (4H, I) and (4H, H); see the module docstring)."""
    x = args[0]
    steps, batch, features = (int(s) for s in x.shape)
    hidden = int(args[2].shape[1])
    gates = 4 * hidden
    rows = steps * batch
    saved = rows * 5 * hidden * x.element_size()  # the gates and cell states kept
    ins = [a for a in args if isinstance(a, torch.Tensor)]
    if name == "mkldnn_rnn_layer":
        return KernelWork(
            matmuls=[(1, rows, features, gates, dtype), (steps, batch, hidden, gates, dtype)],
            scalar_elems=rows * _FWD_SCALAR * hidden,
            vector_elems=rows * _FWD_VECTOR * hidden,
            instructions=steps * _FWD_INSTRUCTIONS,
            hbm_read_bytes=_bytes(ins),
            hbm_write_bytes=_bytes(outs) + saved,
        )
    return KernelWork(
        matmuls=[(1, rows, gates, features, dtype),  # the input's gradient
                 (1, gates, rows, features, dtype),  # the input weights'
                 (1, gates, rows, hidden, dtype),  # the hidden weights'
                 (steps, batch, gates, hidden, dtype)],  # the recurrence's
        scalar_elems=rows * _BWD_SCALAR * hidden,
        vector_elems=rows * _BWD_VECTOR * hidden,
        instructions=steps * _BWD_INSTRUCTIONS,
        hbm_read_bytes=_bytes(ins) + saved,
        hbm_write_bytes=_bytes(outs),
    )
