"""GPT-style decoder training step: identical pre-LN blocks, dropout, AdamW, gradient clipping.

The blocks are identical on purpose: region detection that keys regions by op signatures
and dataflow (not call sites) can share one executable among them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._task import TrainTask, Workload, make_batches

__all__ = ["GPT", "Block", "WORKLOAD"]

VOCAB, SEQ, D_MODEL, HEADS, LAYERS, BATCH, DROPOUT = 128, 32, 64, 4, 4, 8, 0.1


class Block(nn.Module):
    """Pre-LayerNorm block: causal self-attention (dropout on the output) and a GELU MLP."""

    def __init__(self, d_model: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.proj(att.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    """Token + position embeddings, ``layers`` identical blocks, final LayerNorm, tied head."""

    def __init__(self, vocab: int = VOCAB, seq: int = SEQ, d_model: int = D_MODEL,
                 heads: int = HEADS, layers: int = LAYERS, dropout: float = DROPOUT) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(pos))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build(device: str) -> TrainTask:
    torch.manual_seed(0)
    model = GPT().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    def batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    return TrainTask(model, opt, make_batches(4, batch, device), lm_loss, clip_norm=1.0)


WORKLOAD = Workload(
    "gpt", f"GPT decoder: {LAYERS} identical blocks, d={D_MODEL}, seq {SEQ}, batch {BATCH}, "
    f"dropout {DROPOUT}, AdamW, grad clipping", "training", build)
