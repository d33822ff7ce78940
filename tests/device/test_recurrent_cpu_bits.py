"""``nn.GRU``, ``nn.RNN`` and ``nn.GRUCell`` on ``neuron`` give the CPU's bits, forward and backward.

Why: PyTorch's recurrent composites branch on the device; for PrivateUse1 they projected
each step apart and used the fused CUDA-style GRU cell, whose numbers (a deep or
bidirectional GRU's outputs, every gradient) differed from the CPU's in the last bits
(issue 22: the bench's ``cpu`` row of ``gru``). ``dispatch/recurrent.py`` runs the CPU's
branch on the device; each case compares outputs, parameter gradients and the input's
gradient with the same module on CPU, bit for bit.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import torchneuron  # noqa: F401

CASES = [
    ("gru_batch_first", lambda: nn.GRU(16, 32, batch_first=True), (8, 12, 16)),
    ("gru_deep_bidir", lambda: nn.GRU(5, 6, num_layers=2, bidirectional=True), (7, 3, 5)),
    ("gru_nobias_unbatched", lambda: nn.GRU(5, 6, bias=False), (7, 5)),
    ("gru_cell", lambda: nn.GRUCell(16, 32), (8, 16)),
    ("rnn_tanh", lambda: nn.RNN(16, 32), (12, 8, 16)),
    ("rnn_relu_deep_dropout", lambda: nn.RNN(5, 6, num_layers=3, nonlinearity="relu",
                                             dropout=0.5), (7, 3, 5)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "shape"), CASES, ids=[c[0] for c in CASES])
def test_recurrent_bits_equal_cpu(name, make, shape) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    cpu = make()
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(*shape)
    results = []
    for module, device in ((cpu, "cpu"), (dev, "neuron")):
        xi = x.clone().to(device).requires_grad_()
        torch.manual_seed(1)  # dropout between layers draws the same mask
        outs = torch.utils._pytree.tree_leaves(module(xi))
        sum(((i + 1) * t).sum() for i, t in enumerate(outs)).backward()
        results.append([*(t.detach().cpu() for t in outs), xi.grad.cpu(),
                        *(p.grad.cpu() for p in module.parameters())])
    for i, (c, d) in enumerate(zip(*results, strict=True)):
        assert torch.equal(c, d), f"{name}: tensor {i} max diff {(c - d).abs().max().item()}"


PACKED = [
    ("gru", lambda: nn.GRU(5, 6, batch_first=True)),
    ("gru_deep_bidir", lambda: nn.GRU(5, 6, num_layers=2, bidirectional=True,
                                      batch_first=True)),
    ("rnn_relu_nobias_bidir", lambda: nn.RNN(5, 6, nonlinearity="relu", bias=False,
                                             bidirectional=True, batch_first=True)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make"), PACKED, ids=[c[0] for c in PACKED])
def test_packed_sequence_bits_equal_cpu(name, make) -> None:  # noqa: ANN001
    """A packed sequence (``aten::gru.data``): the CPU's packed layers, with initial states."""
    from torch.nn.utils.rnn import pack_padded_sequence

    torch.manual_seed(0)
    cpu = make()
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(3, 7, 5)
    h0 = torch.randn(cpu.num_layers * (2 if cpu.bidirectional else 1), 3, 6)
    results = []
    for module, device in ((cpu, "cpu"), (dev, "neuron")):
        xi = x.clone().to(device).requires_grad_()
        hi = h0.clone().to(device).requires_grad_()
        packed = pack_padded_sequence(xi, torch.tensor([4, 7, 2]), batch_first=True,
                                      enforce_sorted=False)
        out, h = module(packed, hi)
        (out.data.sum() + 2 * h.sum()).backward()
        results.append([out.data.detach().cpu(), h.detach().cpu(), xi.grad.cpu(),
                        hi.grad.cpu(), *(p.grad.cpu() for p in module.parameters())])
    for i, (c, d) in enumerate(zip(*results, strict=True)):
        assert torch.equal(c, d), f"{name}: tensor {i}: {int((c != d).sum())} of {c.numel()} differ"
