"""``nn.GRU``, ``nn.RNN`` and ``nn.GRUCell`` on the device take the CPU's code path.

Why: ``aten::gru``, ``aten::rnn_tanh``, ``aten::rnn_relu`` and ``aten::gru_cell`` are
composites whose C++ branches on the device: for a CPU input a layer computes the input
projection of every time step in one ``linear`` before the loop and a GRU cell its gates
with ``add_``, ``sigmoid_``, ``mul_`` and ``tanh_``; for a PrivateUse1 input the layer
projects step by step and the GRU cell hands its gates to the fused CUDA-style kernel
(``dispatch/rnn.py``), whose fused backward multiplies in another order. The numbers
then differ from the CPU's in the last bits, in the forward of a deep or bidirectional
GRU and in every gradient (issue 22: the bench's ``cpu`` row of ``gru``, 1.2e-07).

Here each of those ops has a kernel at the device's autograd key (and at PrivateUse1,
for ``inference_mode``) that runs the CPU's branch with ordinary ops on the device:
the same ops in the same order, so autograd records the same backward and every value
has the CPU's bits. ``nn.LSTM`` and ``nn.LSTMCell`` are ``dispatch/lstm.py``'s: the CPU
computes a float LSTM with oneDNN's fused layer (``mkldnn_rnn_layer``), which these ops
cannot reproduce. Packed sequences (``aten::gru.data``, ``rnn_tanh.data``,
``rnn_relu.data``) take the CPU's packed layers likewise (the whole packed input's
projection in one ``linear``, the batch narrowed as sequences end): PyTorch's branch for
PrivateUse1 differed there too (37 of 78 outputs of a packed GRU).

Imports torch only (registered by ``dispatch/__init__``'s ``install``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["install", "packed_steps", "reversed_packed_steps"]

_lib: torch.library.Library | None = None

Cell = Callable[[Tensor, Tensor, Sequence[Tensor | None], bool], Tensor]


def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    return torch.nn.functional.linear(x, w, b)


def _gru_cell_step(x: Tensor, h: Tensor, p: Sequence[Tensor | None], projected: bool) -> Tensor:
    """The CPU's GRU cell: ``x`` is the step's input, or its projection when ``projected``."""
    w_ih, w_hh, b_ih, b_hh = p
    ig = (x if projected else _linear(x, w_ih, b_ih)).unsafe_chunk(3, 1)  # type: ignore[arg-type]
    hg = _linear(h, w_hh, b_hh).unsafe_chunk(3, 1)  # type: ignore[arg-type]
    reset = hg[0].add_(ig[0]).sigmoid_()
    update = hg[1].add_(ig[1]).sigmoid_()
    new = ig[2].add(hg[2].mul_(reset)).tanh_()
    return (h - new).mul_(update).add_(new)


def _simple_cell(nonlinearity: Callable[[Tensor], Tensor]) -> Cell:
    def step(x: Tensor, h: Tensor, p: Sequence[Tensor | None], projected: bool) -> Tensor:
        w_ih, w_hh, b_ih, b_hh = p
        xw = x if projected else _linear(x, w_ih, b_ih)  # type: ignore[arg-type]
        return nonlinearity(_linear(h, w_hh, b_hh).add_(xw))  # type: ignore[arg-type]

    return step


def _run_steps(cell: Cell, steps: Sequence[Tensor], h: Tensor, p: Sequence[Tensor | None]
               ) -> tuple[list[Tensor], Tensor]:
    outs = []
    for x in steps:
        h = cell(x, h, p, True)
        outs.append(h)
    return outs, h


def _layer(cell: Cell, x: Tensor, h: Tensor, p: Sequence[Tensor | None]
           ) -> tuple[Tensor, Tensor]:
    """One direction over the sequence: every step's projection in one ``linear`` first."""
    outs, h = _run_steps(cell, _linear(x, p[0], p[2]).unbind(0), h, p)  # type: ignore[arg-type]
    return torch.stack(outs, 0), h


def _bidirectional_layer(cell: Cell, x: Tensor, h: tuple[Tensor, Tensor],
                         p: tuple[Sequence[Tensor | None], Sequence[Tensor | None]]
                         ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    fw_outs, fw_h = _run_steps(cell, _linear(x, p[0][0], p[0][2]).unbind(0), h[0], p[0])  # type: ignore[arg-type]
    fw = torch.stack(fw_outs, 0)
    rev_steps = list(reversed(_linear(x, p[1][0], p[1][2]).unbind(0)))  # type: ignore[arg-type]
    rev_outs, rev_h = _run_steps(cell, rev_steps, h[1], p[1])
    rev = torch.stack(list(reversed(rev_outs)), 0)
    return torch.cat([fw, rev], fw.dim() - 1), (fw_h, rev_h)


def _params(params: Sequence[Tensor], has_biases: bool) -> list[list[Tensor | None]]:
    """Per layer and direction: (w_ih, w_hh, b_ih, b_hh), biases None when absent."""
    if has_biases:
        return [list(params[i:i + 4]) for i in range(0, len(params), 4)]
    return [[*params[i:i + 2], None, None] for i in range(0, len(params), 2)]


def _stack(cell: Cell) -> Callable[..., tuple[Tensor, Tensor]]:
    """``aten::<rnn>.input`` as the CPU computes it, for a cell of one hidden state."""
    def rnn(input: Tensor, hx: Tensor, params: Sequence[Tensor], has_biases: bool,
            num_layers: int, dropout: float, train: bool, bidirectional: bool,
            batch_first: bool) -> tuple[Tensor, Tensor]:
        x = input.transpose(0, 1) if batch_first else input
        weights = _params(params, has_biases)
        hiddens = list(hx.unbind(0))
        finals: list[Tensor] = []
        for layer in range(num_layers):
            if bidirectional:
                h = (hiddens[2 * layer], hiddens[2 * layer + 1])
                p = (weights[2 * layer], weights[2 * layer + 1])
                x, (h_fw, h_rev) = _bidirectional_layer(cell, x, h, p)
                finals += [h_fw, h_rev]
            else:
                x, h_last = _layer(cell, x, hiddens[layer], weights[layer])
                finals.append(h_last)
            if dropout != 0 and train and layer < num_layers - 1:
                x = torch.dropout(x, dropout, True)
        out = x.transpose(0, 1) if batch_first else x
        return out, torch.stack(finals, 0)

    return rnn


State = tuple[Tensor, ...]


def packed_steps(step: Callable[[Tensor, State], State], xw: Tensor, sizes: list[int],
                 state: State) -> tuple[Tensor, State]:
    """ATen's ``PackedLayer`` over a state of one tensor (GRU, RNN) or two (LSTM's h and c):
    ``xw`` is the projected packed data, ``sizes`` the batch size of each step; sequences
    end as the batch shrinks and their final states are set aside. ``step`` returns the new
    state, whose first tensor is the step's output."""
    outs: list[Tensor] = []
    finished: list[State] = []
    offset, last = 0, sizes[0]
    for size in sizes:
        x = xw.narrow(0, offset, size)
        offset += size
        if last - size > 0:
            finished.append(tuple(t.narrow(0, size, last - size) for t in state))
            state = tuple(t.narrow(0, 0, size) for t in state)
        last = size
        state = step(x, state)
        outs.append(state[0])
    finished.append(state)
    return torch.cat(outs, 0), tuple(torch.cat(parts, 0) for parts in zip(*reversed(finished), strict=True))


def reversed_packed_steps(step: Callable[[Tensor, State], State], xw: Tensor,
                          sizes: list[int], initial: State) -> tuple[Tensor, State]:
    """ATen's ``ReversedPackedLayer``: from the last step back, sequences join as the batch
    grows (their initial states appended)."""
    outs: list[Tensor] = []
    offset, last = xw.shape[0], sizes[-1]
    state = tuple(t.narrow(0, 0, sizes[-1]) for t in initial)
    for size in reversed(sizes):
        if size - last > 0:
            state = tuple(torch.cat([t, i.narrow(0, last, size - last)], 0)
                          for t, i in zip(state, initial, strict=True))
        x = xw.narrow(0, offset - size, size)
        offset -= size
        last = size
        state = step(x, state)
        outs.append(state[0])
    return torch.cat(list(reversed(outs)), 0), state


def _packed_layer(cell: Cell, data: Tensor, sizes: list[int], h: Tensor,
                  p: Sequence[Tensor | None], reverse: bool = False) -> tuple[Tensor, Tensor]:
    xw = _linear(data, p[0], p[2])  # type: ignore[arg-type]
    run = reversed_packed_steps if reverse else packed_steps
    out, (h,) = run(lambda x, s: (cell(x, s[0], p, True),), xw, sizes, (h,))
    return out, h


def _packed_stack(cell: Cell) -> Callable[..., tuple[Tensor, Tensor]]:
    """``aten::<rnn>.data`` (a packed sequence) as the CPU computes it."""
    def rnn(data: Tensor, batch_sizes: Tensor, hx: Tensor, params: Sequence[Tensor],
            has_biases: bool, num_layers: int, dropout: float, train: bool,
            bidirectional: bool) -> tuple[Tensor, Tensor]:
        sizes = [int(n) for n in batch_sizes.tolist()]
        weights = _params(params, has_biases)
        hiddens = list(hx.unbind(0))
        finals: list[Tensor] = []
        x = data
        for layer in range(num_layers):
            if bidirectional:
                fw, h_fw = _packed_layer(cell, x, sizes, hiddens[2 * layer], weights[2 * layer])
                rev, h_rev = _packed_layer(cell, x, sizes, hiddens[2 * layer + 1],
                                           weights[2 * layer + 1], reverse=True)
                x = torch.cat([fw, rev], -1)
                finals += [h_fw, h_rev]
            else:
                x, h_last = _packed_layer(cell, x, sizes, hiddens[layer], weights[layer])
                finals.append(h_last)
            if dropout != 0 and train and layer < num_layers - 1:
                x = torch.dropout(x, dropout, True)
        return x, torch.stack(finals, 0)

    return rnn


def _gru_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor,
              b_ih: Tensor | None = None, b_hh: Tensor | None = None) -> Tensor:
    return _gru_cell_step(input, hx, (w_ih, w_hh, b_ih, b_hh), False)


def install() -> None:
    """Register the kernels (idempotent)."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    kernels = {
        "gru.input": _stack(_gru_cell_step),
        "rnn_tanh.input": _stack(_simple_cell(torch.tanh)),
        "rnn_relu.input": _stack(_simple_cell(torch.relu)),
        "gru.data": _packed_stack(_gru_cell_step),
        "rnn_tanh.data": _packed_stack(_simple_cell(torch.tanh)),
        "rnn_relu.data": _packed_stack(_simple_cell(torch.relu)),
        "gru_cell": _gru_cell,
    }
    for name, fn in kernels.items():
        for key in ("AutogradPrivateUse1", "PrivateUse1"):  # PrivateUse1: inference_mode
            _lib.impl(name, fn, key)
