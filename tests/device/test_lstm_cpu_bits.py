"""``nn.LSTM`` and ``nn.LSTMCell`` on ``neuron`` give the CPU's bits: eager, compiled, replayed.

Why: on the CPU a float32 LSTM is oneDNN's fused layer (``mkldnn_rnn_layer`` per layer
and direction), other LSTMs the CPU's default branch; PyTorch's PrivateUse1 branch took
the fused CUDA-style cell instead, and 479 of 640 outputs of a one-layer LSTM differed
(issue 22). ``dispatch/lstm.py`` takes the branch the CPU takes, with the CPU's kernels.
Each case compares with the same module on the CPU bit for bit: outputs, h_n, c_n, the
input's, the initial states' and every parameter's gradient; and the device runs oneDNN's
layer exactly where the CPU does. Under ``torch.compile`` and adaptive eager a result is
eager's or the graph is refused (counted), never different. ``Module.to("neuron")`` of a
module whose parameters a live host graph holds works as on CUDA.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.utils._python_dispatch import TorchDispatchMode

import torchneuron
import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import run
from torchneuron.hardware import get_core
from torchneuron.hardware.settings import override

_LAYER = "mkldnn_rnn_layer"


class _CountOneDNN(TorchDispatchMode):
    """Counts the CPU's calls of oneDNN's layer and its backward."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = {_LAYER: 0, _LAYER + "_backward": 0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        name = func.__name__.split(".")[0]
        if name in self.calls:
            self.calls[name] += 1
        return func(*args, **(kwargs or {}))


def _states(m: nn.LSTM, batch: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    layers = m.num_layers * (2 if m.bidirectional else 1)
    h = torch.randn(layers, batch, m.proj_size or m.hidden_size, generator=g, dtype=dtype)
    return h, torch.randn(layers, batch, m.hidden_size, generator=g, dtype=dtype)


def _run(module: nn.Module, x: torch.Tensor, device: str, h0: tuple | None, packed: list | None,
         grad: bool) -> tuple[list[torch.Tensor], dict[str, int]]:
    """Outputs and gradients on ``device`` (CPU tensors), and the oneDNN calls seen."""
    xi = x.clone().to(device).requires_grad_(grad)
    states = [s.clone().to(device).requires_grad_(grad) for s in h0] if h0 else []
    inp = xi if packed is None else pack_padded_sequence(
        xi, torch.tensor(packed), batch_first=True, enforce_sorted=False)
    before = dict(get_core(0).ops)
    counter = _CountOneDNN()
    torch.manual_seed(1)  # dropout between layers draws the same masks
    with counter if device == "cpu" else torch.enable_grad(), torch.set_grad_enabled(grad):
        out = module(inp, tuple(states)) if states else module(inp)
        if packed is not None:
            out = (pad_packed_sequence(out[0], batch_first=True)[0], out[1])
        outs = torch.utils._pytree.tree_leaves(out)
        if grad:
            sum(((i + 1) * t.float()).sum() for i, t in enumerate(outs)).backward()
    if device == "neuron":
        counter.calls = {k: get_core(0).ops.get(k, 0) - before.get(k, 0) for k in counter.calls}
    got = [t.detach().cpu() for t in outs]
    if grad:
        got += [t.grad.cpu() for t in (xi, *states)] + [p.grad.cpu() for p in module.parameters()]
    return got, counter.calls


LSTMS = [  # name, module, input shape, dtype, initial states, packed lengths, grad
    ("batch_first", lambda: nn.LSTM(6, 32, batch_first=True), (4, 5, 6), torch.float32, False,
     None, True),
    ("deep_bidir_h0", lambda: nn.LSTM(5, 6, num_layers=2, bidirectional=True), (7, 3, 5),
     torch.float32, True, None, True),
    ("nobias_bidir_batch_first", lambda: nn.LSTM(5, 6, bias=False, bidirectional=True,
                                                 batch_first=True), (3, 7, 5), torch.float32,
     False, None, True),
    ("dropout_3_layers", lambda: nn.LSTM(5, 6, num_layers=3, dropout=0.5), (7, 3, 5),
     torch.float32, False, None, True),
    ("unbatched", lambda: nn.LSTM(5, 6), (7, 5), torch.float32, False, None, True),
    ("no_grad", lambda: nn.LSTM(5, 6, num_layers=2), (7, 3, 5), torch.float32, False, None,
     False),
    ("proj_bidir_h0", lambda: nn.LSTM(5, 6, proj_size=4, bidirectional=True), (7, 3, 5),
     torch.float32, True, None, True),
    ("float64_h0", lambda: nn.LSTM(5, 6, num_layers=2), (7, 3, 5), torch.float64, True, None,
     True),
    ("bfloat16", lambda: nn.LSTM(5, 6, batch_first=True), (3, 7, 5), torch.bfloat16, False,
     None, True),
    ("packed_bidir_h0", lambda: nn.LSTM(5, 6, num_layers=2, bidirectional=True,
                                        batch_first=True), (3, 7, 5), torch.float32, True,
     [4, 7, 2], True),
    ("packed_proj", lambda: nn.LSTM(5, 6, proj_size=3, batch_first=True), (3, 7, 5),
     torch.float32, False, [7, 3, 5], True),
    # every sequence as long: the CPU views the packed data as (T, B, E) and runs oneDNN's
    # layers (the device ran the packed layers: a BiLSTM tagger's outputs differed)
    ("packed_equal_bidir_h0", lambda: nn.LSTM(5, 6, num_layers=2, bidirectional=True,
                                              batch_first=True), (3, 7, 5), torch.float32,
     True, [7, 7, 7], True),
    ("packed_equal_no_grad", lambda: nn.LSTM(5, 6, batch_first=True), (3, 4, 5),
     torch.float32, False, [4, 4, 4], False),
    ("packed_equal_float64", lambda: nn.LSTM(5, 6, batch_first=True), (3, 4, 5),
     torch.float64, False, [4, 4, 4], True),
]  # fmt: skip


@pytest.mark.filterwarnings("ignore:LSTM with projections")
@pytest.mark.parametrize(("name", "make", "shape", "dtype", "h0", "packed", "grad"), LSTMS,
                         ids=[c[0] for c in LSTMS])
def test_lstm_bits_and_path_equal_cpu(name, make, shape, dtype, h0, packed, grad) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    cpu = make().to(dtype)
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(*shape, dtype=dtype)
    states = _states(cpu, shape[0] if cpu.batch_first else shape[1], dtype) if h0 else None
    want, cpu_calls = _run(cpu, x, "cpu", states, packed, grad)
    got, dev_calls = _run(dev, x, "neuron", states, packed, grad)
    assert dev_calls == cpu_calls, f"{name}: the CPU took {cpu_calls}, the device {dev_calls}"
    for i, (c, d) in enumerate(zip(want, got, strict=True)):
        assert torch.equal(c, d), f"{name}: tensor {i}: {int((c != d).sum())} of {c.numel()} differ"


def test_lstm_with_onednn_disabled_takes_the_cpus_default_branch() -> None:
    """``torch.backends.mkldnn.flags(enabled=False)``: the CPU's default branch, on both."""
    torch.manual_seed(0)
    cpu = nn.LSTM(5, 6, num_layers=2, bidirectional=True)
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(7, 3, 5)
    with torch.backends.mkldnn.flags(enabled=False):
        want, cpu_calls = _run(cpu, x, "cpu", None, None, True)
        got, dev_calls = _run(dev, x, "neuron", None, None, True)
    assert cpu_calls == dev_calls == {_LAYER: 0, _LAYER + "_backward": 0}
    for i, (c, d) in enumerate(zip(want, got, strict=True)):
        assert torch.equal(c, d), f"tensor {i}: {int((c != d).sum())} of {c.numel()} differ"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell_bits_equal_cpu(dtype: torch.dtype, bias: bool) -> None:
    torch.manual_seed(0)
    cpu = nn.LSTMCell(5, 6, bias=bias).to(dtype)
    dev = copy.deepcopy(cpu).to("neuron")
    x, h, c = (torch.randn(3, n, dtype=dtype) for n in (5, 6, 6))
    results = []
    for m, device in ((cpu, "cpu"), (dev, "neuron")):
        xi, hi, ci = (t.clone().to(device).requires_grad_() for t in (x, h, c))
        hy, cy = m(xi, (hi, ci))
        (hy.float().sum() + 2 * cy.float().sum()).backward()
        results.append([hy.detach().cpu(), cy.detach().cpu(),
                        *(t.grad.cpu() for t in (xi, hi, ci)),
                        *(p.grad.cpu() for p in m.parameters())])
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        assert torch.equal(a, b), f"tensor {i}: {int((a != b).sum())} of {a.numel()} differ"


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN])
def test_to_neuron_after_a_host_forward_whose_output_lives(cls: type) -> None:
    """The host graph of ``out`` holds the weights (saved for its backward); CUDA moves
    them with ``.data =``. The module moves, runs on the device with the CPU's bits and
    trains."""
    torch.manual_seed(0)
    m = cls(6, 8, batch_first=True)
    x = torch.randn(2, 3, 6)
    out = m(x)[0]  # alive: its graph holds the weights
    m.to("neuron")
    assert all(p.device.type == "neuron" for p in m.parameters())
    assert all(w.device.type == "neuron" for w in m._flat_weights)
    dev_out = m(x.to("neuron"))[0]
    assert torch.equal(dev_out.detach().cpu(), out.detach())
    dev_out.sum().backward()
    assert all(p.grad is not None and p.grad.device.type == "neuron" for p in m.parameters())


def _compiled_bits(make, x: torch.Tensor) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    cpu = make()
    dev = copy.deepcopy(cpu).to("neuron")
    fn = torch.compile(dev, backend="neuron")
    results = []
    for m, module, device in ((cpu, cpu, "cpu"), (fn, dev, "neuron")):
        xi = x.clone().to(device).requires_grad_()
        outs = torch.utils._pytree.tree_leaves(m(xi))
        sum(((i + 1) * t).sum() for i, t in enumerate(outs)).backward()
        results.append([*(t.detach().cpu() for t in outs), xi.grad.cpu(),
                        *(p.grad.cpu() for p in module.parameters())])
    for i, (a, b) in enumerate(zip(*results, strict=True)):
        assert torch.equal(a, b), f"tensor {i}: {int((a != b).sum())} of {a.numel()} differ"


def test_compiled_lstm_gives_eagers_bits_or_runs_eagerly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dynamo breaks the graph at an ``nn.LSTM`` (it runs eagerly, with the CPU's bits);
    with ``allow_rnn`` the graph holding ``torch.lstm`` is refused (``lstm-layer``,
    counted): compiled, AOTAutograd's forward ran oneDNN's layer outside grad mode.
    (An ``nn.LSTMCell``, the CPU's cell of ordinary ops, compiles: replayed programs
    below.)"""
    torch._dynamo.reset()
    x = torch.randn(4, 5, 6)
    _compiled_bits(lambda: nn.LSTM(6, 32, batch_first=True, num_layers=2), x)
    monkeypatch.setattr(torch._dynamo.config, "allow_rnn", True)
    torch._dynamo.reset()  # (the frames Dynamo skipped without it)
    torchneuron.compiler.reset_stats()
    _compiled_bits(lambda: nn.LSTM(6, 32, batch_first=True), x)
    assert torchneuron.compiler.stats()["failures_by_stage"].get("prepare:lstm-layer", 0) >= 1
    torch._dynamo.reset()


class _Net(nn.Module):
    def __init__(self, cell: bool) -> None:
        super().__init__()
        self.cell = cell
        self.rnn = nn.LSTMCell(6, 32) if cell else nn.LSTM(6, 32, batch_first=True)
        self.head = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cell:
            h = None
            for t in range(3):
                h = self.rnn(x[:, t], h)
            return self.head(h[0]).squeeze(-1)
        return self.head(self.rnn(x)[0][:, -1]).squeeze(-1)


def _loop(model: nn.Module, steps: int):
    def loop(device: str) -> dict[str, torch.Tensor]:
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(1)
        batches = [torch.randn(4, 5, 6, generator=g) for _ in range(2)]
        losses = []
        for step in range(steps):
            x = batches[step % 2].to(device)
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(m(x), x.sum(dim=(1, 2)) / 5)
            loss.backward()
            opt.step()
            loss.item()
            losses.append(loss.detach().cpu())
        return {"loss": torch.stack(losses), **{k: v.detach().cpu().clone()
                                                for k, v in m.state_dict().items()}}
    return loop


@pytest.mark.parametrize("cell", [False, True], ids=["lstm", "lstm_cell"])
def test_adaptive_eager_lstm_training_gives_cpu_bits(cell: bool) -> None:
    """oneDNN's layer and its backward run between regions from the first step (refused:
    ``onednn-rnn-layer``), the regions around them replay; an ``nn.LSTMCell``'s steps
    replay compiled programs. Every loss and final parameter is the CPU's."""
    torchneuron.reset()  # this test reads adaptive eager's counters: none of an earlier test's
    torch.manual_seed(0)
    model = _Net(cell)
    steps = 3
    cpu = run(_loop(model, steps), "cpu")
    with override(compile_latency=False, ae_first_tier=False, ae_min_gain_ns=0):
        got = run(_loop(model, steps), "neuron", adaptive=True)
        stats = ae.stats()
    differ = {k: f"{int((got[k] != v).sum())} of {v.numel()}" for k, v in cpu.items()
              if not k.startswith("_") and not torch.equal(got[k], v)}
    assert not differ, f"adaptive eager differs from eager CPU: {differ}"
    assert stats["replays"] > 0, ae.explain()
    refused = stats["refused_ops"]
    for op in ("aten.mkldnn_rnn_layer.default", "aten.mkldnn_rnn_layer_backward.default"):
        # (an LSTMCell never calls oneDNN's layer; refusals are listed once met)
        assert refused.get(op) == (None if cell else "onednn-rnn-layer"), refused
    if cell:
        assert "compile-failed" not in stats["fallback_reasons"], ae.explain()


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN], ids=lambda c: c.__name__)
@pytest.mark.parametrize("lengths", [[4, 3, 2], [4, 4, 4]], ids=["shrinking", "equal"])
def test_packed_rnn_in_inference_mode_gives_cpu_bits(cls: type, lengths: list[int]) -> None:
    """In ``inference_mode`` no autograd kernel runs first: the packed RNN and
    ``pad_packed_sequence`` reach the device with the PackedSequence's host ``batch_sizes``
    (they raised "Expected all tensors to be on the same device")."""
    torch.manual_seed(0)
    cpu = cls(5, 6, bidirectional=True)
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(4, 3, 5)
    with torch.inference_mode():
        want, h_want = cpu(pack_padded_sequence(x, torch.tensor(lengths)))
        got, h_got = dev(pack_padded_sequence(x.to("neuron"), torch.tensor(lengths)))
        want, got = pad_packed_sequence(want)[0], pad_packed_sequence(got)[0].cpu()
    assert torch.equal(want, got)
    for w, g in zip(h_want if isinstance(h_want, tuple) else (h_want,),
                    h_got if isinstance(h_got, tuple) else (h_got,), strict=True):
        assert torch.equal(w, g.cpu())
