"""The zoo's training loops, run on the device: shared by the simulated-time guard and the
wall-clock benchmarks.

Why one module: the guard (``tests/hardware/test_sim_times.py``) pins the simulated
nanoseconds of exactly the loops the speed benchmarks (``benchmarks/test_speed.py``)
time on the wall clock, so making the simulator faster can never silently change what
it simulates. Each loop is a real training step (forward, loss, backward, optimizer
step, ``zero_grad``) of a small model:

- ``res_mlp``: a residual MLP (LayerNorm, Linear, ReLU, skip connections) with AdamW.
- ``transformer_lm``: a language model built from ``nn.TransformerEncoderLayer``
  (causal mask, dropout) with AdamW.
- ``cnn``: ``tests.models.CNN`` (Conv2d + BatchNorm2d + ReLU + max-pool) with SGD and
  momentum.

``mode`` is ``"eager"`` (op by op on the device), ``"compiled"`` (the model under
``torch.compile(backend="neuron")``; loss, backward and optimizer as the user writes
them) or ``"cpu"`` (plain CPU PyTorch, the reference for wall time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from tests import models

__all__ = ["LOOPS", "Loop", "ResMLP", "TransformerLM", "make_loop"]

VOCAB, SEQ = 64, 16


class ResMLP(nn.Module):
    """Input projection, two pre-LayerNorm residual MLP blocks, a classifier head."""

    def __init__(self, d_in: int = 32, width: int = 64, n_blocks: int = 2, d_out: int = 10):
        super().__init__()
        self.inp = nn.Linear(d_in, width)
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(n_blocks))
        self.fc1 = nn.ModuleList(nn.Linear(width, 2 * width) for _ in range(n_blocks))
        self.fc2 = nn.ModuleList(nn.Linear(2 * width, width) for _ in range(n_blocks))
        self.head = nn.Linear(width, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for norm, fc1, fc2 in zip(self.norms, self.fc1, self.fc2, strict=True):
            h = h + fc2(torch.relu(fc1(norm(h))))
        return self.head(h)


class TransformerLM(nn.Module):
    """Token + position embeddings, ``nn.TransformerEncoderLayer`` x2 (causal), a head."""

    def __init__(self, d_model: int = 32, n_heads: int = 2, n_layers: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(SEQ, d_model)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, n_heads, 2 * d_model, dropout=0.1,
                                       batch_first=True, norm_first=True)
            for _ in range(n_layers)
        )  # fmt: skip
        self.head = nn.Linear(d_model, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for layer in self.layers:
            x = layer(x, src_mask=self.mask, is_causal=True)
        return self.head(x)


def _data(name: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if name == "res_mlp":
        return torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
    if name == "transformer_lm":
        tokens = torch.randint(0, VOCAB, (8, SEQ + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    return models.batch("cnn", seed)


_BUILD: dict[str, Callable[[], nn.Module]] = {
    "res_mlp": ResMLP,
    "transformer_lm": TransformerLM,
    "cnn": models.CNN,
}
_OPT: dict[str, Callable[[nn.Module], torch.optim.Optimizer]] = {
    "res_mlp": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3),
    "transformer_lm": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3),
    "cnn": lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
}
LOOPS = tuple(_BUILD)
MODES = ("cpu", "eager", "compiled")


@dataclass
class Loop:
    """One training loop ready to step: ``step()`` runs one training step and returns
    the loss tensor (not read back: reading is the caller's choice)."""

    name: str
    mode: str
    step: Callable[[], torch.Tensor]
    model: nn.Module


def make_loop(name: str, mode: str, seed: int = 0) -> Loop:
    """Build loop ``name`` in ``mode``; weights, data and RNG are fixed by ``seed``."""
    if name not in _BUILD:
        raise KeyError(f"unknown loop {name!r}; known: {', '.join(LOOPS)}")
    if mode not in MODES:
        raise KeyError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    device = "cpu" if mode == "cpu" else "neuron"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _BUILD[name]()
    model = model.to(device).train()
    opt = _OPT[name](model)
    x, y = (t.to(device) for t in _data(name, seed))
    fwd = torch.compile(model, backend="neuron") if mode == "compiled" else model
    lossf = nn.functional.cross_entropy

    def step() -> torch.Tensor:
        out = fwd(x)
        loss = lossf(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return Loop(name, mode, step, model)
