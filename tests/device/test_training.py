"""Training loops on the neuron device give CPU PyTorch's losses, gradients,
parameters and buffers.

Why whole loops: a training step is where the device's pieces meet (autograd
through wrapper tensors, optimizers' foreach/in-place updates on parameters,
BatchNorm's running-stat buffers, dropout's RNG, gradient clipping's norms). The
reference is the same model, deep-copied, trained on plain CPU with the same data.
The device runs the very CPU kernels on its buffers, so most results agree to
the last bit; the tolerance (rtol=1e-5, atol=1e-6) leaves room for the two
places where the device legitimately picks another implementation, as cuda
would: optimizers take their foreach path on the device and their for-loop path
on CPU, and ``scaled_dot_product_attention`` runs PyTorch's math decomposition on
the device (no fused PrivateUse1 kernel) where CPU runs its flash kernel
(differences ~5e-7).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

from tests import models

RTOL, ATOL = 1e-5, 1e-6
STEPS = 3


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert actual.device.type == "neuron", what
    torch.testing.assert_close(actual.cpu(), expected, rtol=RTOL, atol=ATOL, msg=what)


def _train(
    name: str,
    model: nn.Module,
    device: str,
    make_opt: Callable[[nn.Module], torch.optim.Optimizer],
    clip: float | None = None,
    steps: int = STEPS,
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[dict[str, torch.Tensor]]]:
    """Train ``model`` on ``device``; return per-step losses, clip norms and grads."""
    opt = make_opt(model)
    losses, norms, grads = [], [], []
    model.train()
    for step in range(steps):
        x, y = models.batch(name, seed=100 + step)
        opt.zero_grad(set_to_none=True)
        loss = models.loss(name, model(x.to(device)), y.to(device))
        loss.backward()
        if clip is not None:
            norms.append(nn.utils.clip_grad_norm_(model.parameters(), clip).detach())
        grads.append({k: p.grad.detach().clone() for k, p in model.named_parameters()})
        opt.step()
        losses.append(loss.detach())
    return losses, norms, grads


def _check_parity(
    name: str,
    make_opt: Callable[[nn.Module], torch.optim.Optimizer],
    clip: float | None = None,
    seed: int | None = None,
) -> tuple[nn.Module, list[torch.Tensor]]:
    cpu = models.build(name, seed=0)
    dev = copy.deepcopy(cpu).to("neuron")
    if seed is not None:
        torch.manual_seed(seed)
    ref = _train(name, cpu, "cpu", make_opt, clip)
    if seed is not None:
        torch.manual_seed(seed)
    out = _train(name, dev, "neuron", make_opt, clip)
    for step, (a, b) in enumerate(zip(out[0], ref[0], strict=True)):
        _close(a, b, f"loss at step {step}")
    for step, (a, b) in enumerate(zip(out[1], ref[1], strict=True)):
        _close(a, b, f"clip norm at step {step}")
    for step, (ga, gb) in enumerate(zip(out[2], ref[2], strict=True)):
        for k in gb:
            _close(ga[k], gb[k], f"grad of {k} at step {step}")
    for (k, p), (_, q) in zip(dev.named_parameters(), cpu.named_parameters(), strict=True):
        _close(p.detach(), q.detach(), f"parameter {k}")
    for (k, b), (_, c) in zip(dev.named_buffers(), cpu.named_buffers(), strict=True):
        _close(b, c, f"buffer {k}")
    # The loop must actually learn something, or parity would be vacuous.
    assert not torch.equal(out[0][0].cpu(), out[0][-1].cpu())
    return dev, ref[1]


def test_mlp_sgd_momentum() -> None:
    _check_parity("mlp", lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))


def test_tiny_lm_adamw() -> None:
    _check_parity(
        "tiny_lm", lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1)
    )


def test_cnn_batchnorm_buffers() -> None:
    dev, _ = _check_parity("cnn", lambda m: torch.optim.SGD(m.parameters(), lr=0.05))
    # running stats moved away from their init and the step counter is exact
    assert dev.bn1.num_batches_tracked.item() == STEPS
    assert not torch.equal(dev.bn1.running_mean.cpu(), torch.zeros(8))
    # eval mode uses the running stats: same outputs as CPU in eval mode
    x, _ = models.batch("cnn", seed=7)
    cpu = models.build("cnn", seed=0)
    _train("cnn", cpu, "cpu", lambda m: torch.optim.SGD(m.parameters(), lr=0.05))
    with torch.no_grad():
        _close(dev.eval()(x.to("neuron")), cpu.eval()(x), "eval-mode output")


def test_dropout_under_fixed_seed() -> None:
    _check_parity(
        "dropout_mlp", lambda m: torch.optim.Adam(m.parameters(), lr=1e-2), seed=1234
    )


def test_dropout_masks_differ_without_reseeding() -> None:
    """Guard against a vacuous dropout test: two steps draw different masks."""
    m = models.build("dropout_mlp").to("neuron").train()
    x = torch.ones(4, 32, device="neuron")
    torch.manual_seed(0)
    a, b = m(x), m(x)
    assert not torch.equal(a.cpu(), b.cpu())


def test_gradient_clipping() -> None:
    max_norm = 0.05
    _, norms = _check_parity(
        "mlp", lambda m: torch.optim.SGD(m.parameters(), lr=0.1), clip=max_norm
    )
    assert all(n.item() > max_norm for n in norms), "clipping must have been active"


@pytest.mark.parametrize("foreach", [False, True])
def test_optimizer_paths_are_exact(foreach: bool) -> None:
    """With the same optimizer implementation on both sides, results are bit-identical."""
    make = lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=foreach)  # noqa: E731
    cpu = models.build("mlp", seed=3)
    dev = copy.deepcopy(cpu).to("neuron")
    ref = _train("mlp", cpu, "cpu", make)
    out = _train("mlp", dev, "neuron", make)
    for a, b in zip(out[0], ref[0], strict=True):
        assert torch.equal(a.cpu(), b)
    for (k, p), (_, q) in zip(dev.named_parameters(), cpu.named_parameters(), strict=True):
        assert torch.equal(p.detach().cpu(), q.detach()), k


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpoint_replays_dropout_mask(use_reentrant: bool) -> None:
    """``torch.utils.checkpoint`` recomputes a segment in the backward with the device
    RNG state it saved in the forward, so dropout draws the same mask twice and the
    gradients are CPU's. It saves device states only when the device module says it is
    ``_initialized`` (as ``torch.cuda`` does once CUDA is up); without that the
    recomputation drew a fresh mask and every gradient was wrong."""
    from torch.utils.checkpoint import checkpoint

    def grads(device: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        lin = nn.Linear(8, 8, device=device)
        x = torch.randn(4, 8, device=device, requires_grad=True)

        def segment(t: torch.Tensor) -> torch.Tensor:
            return nn.functional.dropout(torch.tanh(lin(t)), 0.5)

        checkpoint(segment, x, use_reentrant=use_reentrant).square().sum().backward()
        return [t.grad for t in (x, lin.weight, lin.bias)]

    for got, want in zip(grads("neuron"), grads("cpu"), strict=True):
        _close(got, want, "checkpointed gradient")
