"""``nn.LSTM`` and ``nn.LSTMCell`` on the device take the CPU's code path, oneDNN's included.

Why: ``aten::lstm`` is a composite whose C++ branches on the device (ATen's
``native/RNN.cpp``). For a CPU input it asks ``use_mkldnn``: oneDNN is enabled
(``torch.backends.mkldnn.enabled``), every tensor is a CPU tensor, the input is float32,
or bfloat16 on a CPU oneDNN gives bfloat16 (``mkldnn_bf16_device_check``), or float16
outside grad mode on a CPU with float16 support, and the input is not empty; and the
LSTM has no projections and no symbolic sizes. Then ``lstm_mkldnn`` runs one fused
oneDNN kernel per layer and direction, ``aten::mkldnn_rnn_layer``, whose derivative is
``mkldnn_rnn_layer_backward``. Otherwise (float64, ``proj_size``, a packed sequence whose batch
shrinks, bfloat16 on an AVX2 CPU) the CPU's default branch projects the whole sequence's input in
one ``linear`` and runs a cell of ordinary ops with in-place gates. For a PrivateUse1
input PyTorch took neither: it projected step by step and handed the gates to the fused
CUDA-style cell (``dispatch/rnn.py``), whose numbers differed from the CPU's in most
elements (issue 22: 479 of 640 outputs of a one-layer LSTM).

Here ``aten::lstm.input``, ``aten::lstm.data`` and ``aten::lstm_cell`` have kernels at
the device's autograd key (and at PrivateUse1, for ``inference_mode``) that take the
branch the CPU would take with the same tensors on the host, with the same ops in the
same order. On the oneDNN branch, that is ``mkldnn_rnn_layer`` per layer and direction:
autograd records its derivative as on the CPU, and the device runs both ops with the CPU
kernel on its buffers (``dispatch/eager``), which gives the CPU's bits on any CPU because
it is the CPU's kernel. Its cost is a Trainium LSTM layer's (``hardware/eager_work``).
Which dtypes take oneDNN is asked of the CPU itself, once per dtype and grad mode, by
running a one-element LSTM on the host (``_cpu_takes_onednn``): its answer is
``use_mkldnn``'s on this machine, not a copy of its CPU checks.

Imports torch and ``dispatch.recurrent`` only (registered by ``dispatch/__init__``'s
``install``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from torchneuron.dispatch.recurrent import packed_steps, reversed_packed_steps

__all__ = ["cpu_takes_onednn", "install"]

_lib: torch.library.Library | None = None
_MODE_LSTM = 2  # ideep::rnn_kind::LSTM, the ``mode`` the CPU passes to mkldnn_rnn_layer

Hidden = tuple[Tensor, Tensor]
# (w_ih, w_hh, b_ih, b_hh, w_hr) of one layer and direction, absent ones None
Weights = tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor | None]

_ONEDNN_DTYPES: dict[tuple[torch.dtype, bool, bool], bool] = {}


class _SawOneDNN(torch.utils._python_dispatch.TorchDispatchMode):
    """Notes whether a host LSTM called oneDNN's layer."""

    def __init__(self) -> None:
        super().__init__()
        self.saw = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if func is torch.ops.aten.mkldnn_rnn_layer.default:
            self.saw = True
        return func(*args, **(kwargs or {}))


def _dtype_takes_onednn(dtype: torch.dtype) -> bool:
    """``use_mkldnn``'s answer for a non-empty host input of ``dtype``, asked of the CPU."""
    grad = torch.is_grad_enabled()
    key = (dtype, grad, torch._C._get_mkldnn_enabled())
    if key not in _ONEDNN_DTYPES:
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes(), torch.inference_mode(False), torch.set_grad_enabled(grad):
            x = torch.zeros(1, 1, 1, dtype=dtype)
            h = torch.zeros(1, 1, 1, dtype=dtype)
            w = torch.zeros(4, 1, dtype=dtype)
            seen = _SawOneDNN()
            try:
                with seen:
                    torch.lstm(x, (h, h), (w, w), False, 1, 0.0, False, False, False)
            except RuntimeError:  # no CPU kernel for the dtype: not oneDNN either
                pass
            _ONEDNN_DTYPES[key] = seen.saw
    return _ONEDNN_DTYPES[key]


def _symbolic(t: Tensor) -> bool:
    return any(isinstance(s, torch.SymInt) for s in (*t.shape, *t.stride()))


def cpu_takes_onednn(input: Tensor, hx: Sequence[Tensor]) -> bool:
    """Whether ``aten::lstm.input`` would run oneDNN's layers for these tensors on the host
    (``use_mkldnn``, no projections, no symbolic sizes: see the module docstring)."""
    if input.numel() == 0 or hx[0].shape[2] != hx[1].shape[2] or _symbolic(hx[0]):
        return False
    return _dtype_takes_onednn(input.dtype)


def _weights(params: Sequence[Tensor], has_biases: bool, has_projections: bool) -> list[Weights]:
    """``gather_params``: per layer and direction, absent weights None."""
    n = (4 if has_biases else 2) + (1 if has_projections else 0)
    out: list[Weights] = []
    for i in range(0, len(params), n):
        p = list(params[i:i + n])
        w_hr = p.pop() if has_projections else None
        b_ih, b_hh = (p[2], p[3]) if has_biases else (None, None)
        out.append((p[0], p[1], b_ih, b_hh, w_hr))
    return out


# --- oneDNN's branch: ``mkldnn_rnn`` over ``mkldnn_rnn_layer`` -------------------------

def _onednn(input: Tensor, hx: Sequence[Tensor], params: Sequence[Tensor], has_biases: bool,
            num_layers: int, dropout: float, train: bool, bidirectional: bool,
            batch_first: bool) -> tuple[Tensor, Tensor, Tensor]:
    x = (input.transpose(0, 1) if batch_first else input).contiguous()
    h0, c0 = hx[0].contiguous(), hx[1].contiguous()
    hidden_size = h0.shape[2]
    stride = 4 if has_biases else 2
    directions = 2 if bidirectional else 1
    hy: list[Tensor] = []
    cy: list[Tensor] = []
    for layer in range(num_layers):
        outs = []
        for direction in range(directions):
            index = layer * directions + direction
            w = params[index * stride:(index + 1) * stride]
            b_ih = w[2] if has_biases else torch.zeros(w[0].shape, dtype=w[0].dtype, device=w[0].device)
            b_hh = w[3] if has_biases else torch.zeros(w[1].shape, dtype=w[1].dtype, device=w[1].device)
            out, h, c, _ = torch.ops.aten.mkldnn_rnn_layer(
                x, w[0], w[1], b_ih, b_hh, h0[index], c0[index], direction > 0, [], _MODE_LSTM,
                hidden_size, num_layers, has_biases, bidirectional, batch_first, train)
            outs.append(out)
            hy.append(h)
            cy.append(c)
        x = outs[0] if directions == 1 else torch.cat(outs, -1)
        if dropout != 0 and train and layer < num_layers - 1:
            x = torch.dropout(x, dropout, True)
    return (x.transpose(0, 1) if batch_first else x), torch.stack(hy, 0), torch.stack(cy, 0)


# --- the CPU's default branch: ``LSTMCell`` over full or packed layers -----------------

def _cell(x: Tensor, hidden: Hidden, w: Weights, projected: bool) -> Hidden:
    """The CPU's ``LSTMCell``: ``x`` is the step's input, or its projection when ``projected``."""
    hx, cx = hidden
    w_ih, w_hh, b_ih, b_hh, w_hr = w
    gates = torch.nn.functional.linear(hx, w_hh, b_hh)
    gates = gates.add_(x if projected else torch.nn.functional.linear(x, w_ih, b_ih))
    i, f, g, o = gates.unsafe_chunk(4, 1)
    i, f, g, o = i.sigmoid_(), f.sigmoid_(), g.tanh_(), o.sigmoid_()
    cy = (f * cx).add_(i * g)
    hy = o * cy.tanh()
    if w_hr is not None:
        hy = torch.matmul(hy, w_hr.t())
    return hy, cy


def _project(x: Tensor, w: Weights) -> Tensor:
    return torch.nn.functional.linear(x, w[0], w[2])


def _steps(steps: Sequence[Tensor], hidden: Hidden, w: Weights) -> tuple[list[Tensor], Hidden]:
    outs = []
    for x in steps:
        hidden = _cell(x, hidden, w, True)
        outs.append(hidden[0])
    return outs, hidden


def _full_layer(x: Tensor, hidden: Hidden, w: Weights) -> tuple[Tensor, Hidden]:
    outs, hidden = _steps(_project(x, w).unbind(0), hidden, w)
    return torch.stack(outs, 0), hidden


def _full_bidirectional(x: Tensor, hidden: tuple[Hidden, Hidden], w: tuple[Weights, Weights]
                        ) -> tuple[Tensor, tuple[Hidden, Hidden]]:
    fw_outs, fw_h = _steps(_project(x, w[0]).unbind(0), hidden[0], w[0])
    fw = torch.stack(fw_outs, 0)
    rev_outs, rev_h = _steps(list(reversed(_project(x, w[1]).unbind(0))), hidden[1], w[1])
    rev = torch.stack(list(reversed(rev_outs)), 0)
    return torch.cat([fw, rev], fw.dim() - 1), (fw_h, rev_h)


def _packed_layer(data: Tensor, sizes: list[int], hidden: Hidden, w: Weights,
                  reverse: bool = False) -> tuple[Tensor, Hidden]:
    """ATen's ``PackedLayer`` (or ``ReversedPackedLayer``) with the LSTM cell
    (``recurrent.packed_steps``: the loop GRU and RNN share)."""
    run = reversed_packed_steps if reverse else packed_steps
    out, (h, c) = run(lambda x, s: _cell(x, (s[0], s[1]), w, True), _project(data, w), sizes,
                      hidden)
    return out, (h, c)


def _default(x: Tensor, sizes: list[int] | None, hx: Sequence[Tensor],
             params: Sequence[Tensor], has_biases: bool, num_layers: int, dropout: float,
             train: bool, bidirectional: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``_lstm_impl`` over full layers (``sizes`` None) or packed ones."""
    weights = _weights(params, has_biases, hx[0].shape[2] != hx[1].shape[2])
    hiddens = list(zip(hx[0].unbind(0), hx[1].unbind(0), strict=True))
    finals: list[Hidden] = []
    for layer in range(num_layers):
        if bidirectional:
            h, w = (hiddens[2 * layer], hiddens[2 * layer + 1]), (weights[2 * layer], weights[2 * layer + 1])
            if sizes is None:
                x, (h_fw, h_rev) = _full_bidirectional(x, h, w)
            else:
                fw, h_fw = _packed_layer(x, sizes, h[0], w[0])
                rev, h_rev = _packed_layer(x, sizes, h[1], w[1], reverse=True)
                x = torch.cat([fw, rev], -1)
            finals += [h_fw, h_rev]
        else:
            if sizes is None:
                x, h_last = _full_layer(x, hiddens[layer], weights[layer])
            else:
                x, h_last = _packed_layer(x, sizes, hiddens[layer], weights[layer])
            finals.append(h_last)
        if dropout != 0 and train and layer < num_layers - 1:
            x = torch.dropout(x, dropout, True)
    return x, torch.stack([h for h, _ in finals], 0), torch.stack([c for _, c in finals], 0)


# --- the kernels ------------------------------------------------------------------------

def _lstm_input(input: Tensor, hx: Sequence[Tensor], params: Sequence[Tensor],
                has_biases: bool, num_layers: int, dropout: float, train: bool,
                bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor, Tensor]:
    if cpu_takes_onednn(input, hx):
        return _onednn(input, hx, params, has_biases, num_layers, dropout, train,
                       bidirectional, batch_first)
    x = input.transpose(0, 1) if batch_first else input
    out, hy, cy = _default(x, None, hx, params, has_biases, num_layers, dropout, train,
                           bidirectional)
    return (out.transpose(0, 1) if batch_first else out), hy, cy


def _lstm_data(data: Tensor, batch_sizes: Tensor, hx: Sequence[Tensor],
               params: Sequence[Tensor], has_biases: bool, num_layers: int, dropout: float,
               train: bool, bidirectional: bool) -> tuple[Tensor, Tensor, Tensor]:
    """A packed sequence: oneDNN's layers when every step has the whole batch (the CPU
    then views the data as a (T, B, E) sequence), else the CPU's packed layers."""
    sizes = [int(s) for s in batch_sizes.tolist()]
    if sizes and len(set(sizes)) == 1 and cpu_takes_onednn(data, hx):
        x = data.view(len(sizes), sizes[0], *data.shape[1:])
        out, hy, cy = _onednn(x, hx, params, has_biases, num_layers, dropout, train,
                              bidirectional, False)
        return out.view(data.shape[0], *out.shape[2:]), hy, cy
    return _default(data, sizes, hx, params, has_biases, num_layers, dropout, train,
                    bidirectional)


def _lstm_cell(input: Tensor, hx: Sequence[Tensor], w_ih: Tensor, w_hh: Tensor,
               b_ih: Tensor | None = None, b_hh: Tensor | None = None) -> tuple[Tensor, Tensor]:
    return _cell(input, (hx[0], hx[1]), (w_ih, w_hh, b_ih, b_hh, None), False)


def install() -> None:
    """Register the kernels (idempotent)."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    kernels = {"lstm.input": _lstm_input, "lstm.data": _lstm_data, "lstm_cell": _lstm_cell}
    for name, fn in kernels.items():
        for key in ("AutogradPrivateUse1", "PrivateUse1"):  # PrivateUse1: inference_mode
            _lib.impl(name, fn, key)
