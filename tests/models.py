"""A small model zoo shared by the tests (device parity now, torch.compile later).

Why builders that take a seed and return CPU modules: every parity test builds one
model, deep-copies it, moves one copy to the device under test and keeps the other
on plain CPU PyTorch as the reference. Seeding the builder (with a private
generator, so building a model never disturbs the global RNG streams a test is
comparing) makes every test start from the same weights on every run.

Each model is tiny (forward+backward well under a millisecond of CPU work) but
exercises a family of ops real workloads use:

- ``mlp``: Linear/ReLU; the launch-bound eager case.
- ``tiny_lm``: a GPT-style language model: embeddings, LayerNorm, causal
  ``scaled_dot_product_attention``, GELU MLP, tied input/output embeddings.
- ``cnn``: Conv2d + BatchNorm2d (running-stat buffers) + ReLU + max-pool.
- ``dropout_mlp``: an MLP with dropout, for RNG parity under a fixed seed.

``batch(name, seed)`` gives matching inputs and targets; ``loss(name, out, y)``
the loss each model is trained with.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["BUILDERS", "MLP", "CNN", "DropoutMLP", "TinyLM", "batch", "build", "loss"]

VOCAB = 64
SEQ = 16


class MLP(nn.Module):
    """Two hidden layers of Linear + ReLU."""

    def __init__(self, d_in: int = 32, hidden: int = 64, d_out: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class DropoutMLP(nn.Module):
    """An MLP whose hidden activations go through dropout (random ops in training)."""

    def __init__(self, d_in: int = 32, hidden: int = 64, d_out: int = 10, p: float = 0.3) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.drop = nn.Dropout(p)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(F.relu(self.fc1(x))))


class CNN(nn.Module):
    """Conv -> BatchNorm -> ReLU -> MaxPool, twice, then global average pool and a head."""

    def __init__(self, channels: int = 3, n_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.head(x.mean(dim=(2, 3)))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: causal self-attention and a GELU MLP."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        # No qkv bias (as in LLaMA-style models): the key bias's gradient is zero in exact
        # arithmetic (softmax is shift-invariant), so in floats it is pure rounding noise,
        # which Adam would normalize into full-size, backend-dependent updates.
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyLM(nn.Module):
    """A GPT-style language model with tied input/output embeddings."""

    def __init__(
        self, vocab: int = VOCAB, seq: int = SEQ, d_model: int = 32, n_heads: int = 2,
        n_layers: int = 2,
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied: one Parameter, two uses

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


BUILDERS: dict[str, Callable[[], nn.Module]] = {
    "mlp": MLP,
    "tiny_lm": TinyLM,
    "cnn": CNN,
    "dropout_mlp": DropoutMLP,
}


def build(name: str, seed: int = 0) -> nn.Module:
    """Model ``name`` on CPU, initialized from ``seed`` without touching the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return BUILDERS[name]()


def batch(name: str, seed: int = 0, size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU inputs and targets for model ``name`` (deterministic in ``seed``)."""
    g = torch.Generator().manual_seed(seed)
    if name in ("mlp", "dropout_mlp"):
        return torch.randn(size, 32, generator=g), torch.randint(0, 10, (size,), generator=g)
    if name == "cnn":
        return torch.randn(size, 3, 16, 16, generator=g), torch.randint(0, 10, (size,), generator=g)
    if name == "tiny_lm":
        tokens = torch.randint(0, VOCAB, (size, SEQ + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    raise KeyError(f"unknown model {name!r}; known: {', '.join(BUILDERS)}")


def loss(name: str, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The training loss of model ``name`` (cross-entropy; over tokens for the LM)."""
    if name == "tiny_lm":
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
    return F.cross_entropy(out, target)
