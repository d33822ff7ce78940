"""Ops that users reach through ``torch.nn`` and that need more than a CPU kernel on the
buffers: recurrent layers (PyTorch picks CUDA-only fused cells for PrivateUse1), APIs
that take CPU length tensors (``pack_padded_sequence``, ``ctc_loss``), fractional max
pooling with given samples.

Every check runs the same module or function on CPU and on neuron from the same
values and compares outputs and gradients (parameters and inputs); the recurrent
layers must also run on the device, with the cost model charged, not on the host.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torchneuron
from torchneuron.hardware import get_core

NEURON = torch.device("neuron")


def _twin(x: torch.Tensor) -> torch.Tensor:
    """The same values on neuron, a leaf requiring grad if ``x`` does."""
    return x.detach().to(NEURON).requires_grad_(x.requires_grad)


def _assert_grads_match(cpu: nn.Module, dev: nn.Module) -> None:
    for (name, p), (_, q) in zip(cpu.named_parameters(), dev.named_parameters(), strict=True):
        assert q.grad is not None and q.grad.device.type == "neuron", name
        torch.testing.assert_close(q.grad.cpu(), p.grad, msg=name)


RECURRENT = [
    ("lstm", lambda: nn.LSTM(5, 6), (7, 3, 5)),
    ("lstm_deep_bidir_batch_first", lambda: nn.LSTM(5, 6, num_layers=2, bidirectional=True,
                                                    batch_first=True), (3, 7, 5)),
    ("lstm_proj_nobias", lambda: nn.LSTM(5, 6, proj_size=4, bias=False), (7, 3, 5)),
    ("lstm_unbatched", lambda: nn.LSTM(5, 6), (7, 5)),
    ("gru", lambda: nn.GRU(5, 6), (7, 3, 5)),
    ("gru_deep_bidir", lambda: nn.GRU(5, 6, num_layers=2, bidirectional=True), (7, 3, 5)),
    ("gru_nobias", lambda: nn.GRU(5, 6, bias=False), (7, 3, 5)),
    ("lstm_cell", lambda: nn.LSTMCell(5, 6), (3, 5)),
    ("lstm_cell_unbatched", lambda: nn.LSTMCell(5, 6), (5,)),
    ("gru_cell", lambda: nn.GRUCell(5, 6), (3, 5)),
    ("gru_cell_nobias", lambda: nn.GRUCell(5, 6, bias=False), (3, 5)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "shape"), RECURRENT, ids=[r[0] for r in RECURRENT])
def test_recurrent_layers_match_cpu_and_run_on_the_device(name, make, shape) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    cpu = make()
    dev = copy.deepcopy(cpu).to(NEURON)
    x = torch.randn(*shape, requires_grad=True)
    xn = _twin(x)
    core = get_core(0)
    before_ns, before_ops = core.now, dict(core.ops)
    out_cpu, out_dev = cpu(x), dev(xn)
    flat_cpu = torch.utils._pytree.tree_leaves(out_cpu)
    flat_dev = torch.utils._pytree.tree_leaves(out_dev)
    for c, d in zip(flat_cpu, flat_dev, strict=True):
        assert d.device.type == "neuron"
        torch.testing.assert_close(d.cpu(), c)
    # a loss that reaches every output (h_n / c_n too), with distinct weights
    sum(((i + 1) * t).sum() for i, t in enumerate(flat_cpu)).backward()
    sum(((i + 1) * t).sum() for i, t in enumerate(flat_dev)).backward()
    _assert_grads_match(cpu, dev)
    torch.testing.assert_close(xn.grad.cpu(), x.grad)
    ran = {k: v - before_ops.get(k, 0) for k, v in core.ops.items()}
    # the CPU's code path (dispatch/recurrent.py, dispatch/lstm.py), not the fused cells
    assert not any(k.startswith("_thnn_fused") for k in ran), ran
    if name in ("lstm", "lstm_deep_bidir_batch_first", "lstm_unbatched"):
        # oneDNN's layer, as the CPU takes it for float32, as device kernels
        assert ran.get("mkldnn_rnn_layer", 0) > 0, ran
        assert ran.get("mkldnn_rnn_layer_backward", 0) > 0, ran
    assert not set(ran) & set(torchneuron.fallback_ops())
    assert core.now > before_ns  # charged on the clock


def test_gru_cell_double_backward_matches_cpu() -> None:
    """``create_graph=True`` takes PyTorch's differentiable cell backward instead."""
    torch.manual_seed(0)
    cpu = nn.GRUCell(4, 3)
    dev = copy.deepcopy(cpu).to(NEURON)
    x = torch.randn(2, 4, requires_grad=True)
    xn = _twin(x)
    results = []
    for m, inp in ((cpu, x), (dev, xn)):
        (g,) = torch.autograd.grad(m(inp).square().sum(), inp, create_graph=True)
        g.sum().backward()
        results.append([g, inp.grad, *(p.grad for p in m.parameters())])
    for c, d in zip(*results, strict=True):
        torch.testing.assert_close(d.cpu(), c)


def test_packed_sequence_with_cpu_lengths_matches_cpu() -> None:
    torch.manual_seed(0)
    cpu = nn.LSTM(4, 5, batch_first=True)
    dev = copy.deepcopy(cpu).to(NEURON)
    x = torch.randn(3, 6, 4, requires_grad=True)
    xn = _twin(x)
    lengths = torch.tensor([4, 6, 2])  # CPU, unsorted: as PyTorch's API requires
    outs = []
    for m, inp in ((cpu, x), (dev, xn)):
        packed = pack_padded_sequence(inp, lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = m(packed)
        padded, out_lengths = pad_packed_sequence(out, batch_first=True)
        assert packed.batch_sizes.device.type == "cpu"  # PyTorch keeps it on the host
        assert out_lengths.device.type == "cpu"
        (padded.sum() + 2 * h.sum() + 3 * c.sum()).backward()
        outs.append((packed.data, padded, out_lengths, h, c, inp.grad))
    for c_, d in zip(*outs, strict=True):
        torch.testing.assert_close(d.cpu(), c_)
    _assert_grads_match(cpu, dev)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("lengths_on", ["cpu", "neuron"])
def test_ctc_loss_with_length_tensors_matches_cpu(reduction: str, lengths_on: str) -> None:
    torch.manual_seed(0)
    log_probs = torch.randn(12, 3, 6).log_softmax(2).detach().requires_grad_()
    targets = torch.randint(1, 6, (3, 5))
    input_lengths = torch.tensor([12, 10, 9])
    target_lengths = torch.tensor([5, 3, 4])
    loss = nn.functional.ctc_loss(log_probs, targets, input_lengths, target_lengths,
                                  reduction=reduction, zero_infinity=True)  # fmt: skip
    loss.sum().backward()
    lp = _twin(log_probs)
    dev_loss = nn.functional.ctc_loss(
        lp, targets.to(NEURON), input_lengths.to(lengths_on), target_lengths.to(lengths_on),
        reduction=reduction, zero_infinity=True,
    )  # fmt: skip
    dev_loss.sum().backward()
    assert dev_loss.device.type == "neuron"
    torch.testing.assert_close(dev_loss.cpu(), loss)
    torch.testing.assert_close(lp.grad.cpu(), log_probs.grad)


def test_ctc_loss_rejects_float_lengths_like_cpu() -> None:
    lp = torch.randn(4, 1, 3).log_softmax(2)
    args = (torch.tensor([[1, 2]]), torch.tensor([4.0]), torch.tensor([2]))
    with pytest.raises(RuntimeError, match="input_lengths must be integral"):
        nn.functional.ctc_loss(lp, *args)
    with pytest.raises(RuntimeError, match="input_lengths must be integral"):
        nn.functional.ctc_loss(lp.to(NEURON), args[0].to(NEURON), *args[1:])


@pytest.mark.parametrize("dim", [2, 3])
def test_fractional_max_pool_with_given_samples_matches_cpu(dim: int) -> None:
    torch.manual_seed(0)
    cls = nn.FractionalMaxPool2d if dim == 2 else nn.FractionalMaxPool3d
    x = torch.randn(2, 3, *([7] * dim), requires_grad=True)
    samples = torch.rand(2, 3, dim)
    cpu = cls(2, output_ratio=0.5, _random_samples=samples, return_indices=True)
    dev = copy.deepcopy(cpu).to(NEURON)
    xn = _twin(x)
    (y, i), (yn, i_n) = cpu(x), dev(xn)
    y.square().sum().backward()
    yn.square().sum().backward()
    for c, d in ((y, yn), (i, i_n), (x.grad, xn.grad)):
        torch.testing.assert_close(d.cpu(), c)
    # float64 samples for a float32 input: the same error as CPU
    bad = cls(2, output_ratio=0.5, _random_samples=samples.double())
    with pytest.raises(RuntimeError, match="same dtype as input"):
        bad(x)
    with pytest.raises(RuntimeError, match="same dtype as input"):
        copy.deepcopy(bad).to(NEURON)(xn)
