"""Regions around ops the compiler refuses become hot and replay (issue 20).

A bfloat16 CNN training step: its convolutions are refused (``half-conv``) and so is its
BatchNorm (``batch-norm-bfloat16``), which the compiler names by the op its preparation
made of the stream's (``_native_batch_norm_legit`` for ``native_batch_norm``). Both are
learned from the first failed compiles and run eagerly between regions; the regions
around them (ReLU and max pooling, the parameter update) must then compile and replay,
with eager's numbers. Before, the BatchNorm refusal was never matched to the stream's
op, so every region holding it failed to compile again and nothing replayed.

The update is written out (``p -= lr * grad``: a product and a difference, each rounded
once in eager and in the program) rather than ``torch.optim.SGD``, whose
``add_(grad, alpha=-lr)`` eager computes as one fused multiply-add.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import torchneuron.adaptive_eager as ae
from torchneuron.hardware.settings import override

STEPS = 16


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 2 * 2, 4))


def _train(device: str) -> tuple[list[float], dict[str, torch.Tensor]]:
    model = _model().to(torch.bfloat16).to(device)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 3, 8, 8, generator=g).to(torch.bfloat16),
             torch.randint(0, 4, (4,), generator=g)) for _ in range(2)]
    losses = []
    for i in range(STEPS):
        x, y = (t.to(device) for t in data[i % 2])
        for p in model.parameters():
            p.grad = None
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad
        losses.append(loss.item())
    return losses, {k: v.cpu() for k, v in model.state_dict().items()}


def test_regions_around_refused_conv_and_batch_norm_replay_with_eagers_numbers() -> None:
    want_losses, want_state = _train("cpu")
    with override(compile_latency=False):
        ae.enable()
        try:
            losses, state = _train("neuron")
        finally:
            ae.disable()
    s = ae.stats()
    assert s["refused_ops"].get("aten.convolution.default") == "half-conv", s
    assert s["refused_ops"].get("aten.native_batch_norm.default") == "batch-norm-bfloat16", s
    text = ae.explain()
    assert s["replays"] >= STEPS // 2, text  # several regions, from step ~6 on
    # the BatchNorm region's failure says that the op runs between regions from now on
    assert "_native_batch_norm_legit (batch-norm-bfloat16, prepare stage). The region runs " \
        "eagerly, with eager's results; that op runs eagerly between regions" in text, text
    assert losses == want_losses
    for k, v in want_state.items():
        assert torch.equal(state[k], v), k
