"""Greedy decoding with a KV cache: step 0 is the prompt (prefill), each later step one token.

The cache grows by one position per step (``torch.cat``), the plain way to write it: every
step has new shapes, which is what static-shape compilers pay for. Adaptive eager runs the
ops whose shapes grow (the ``cat`` onto the cache and the attention over it) eagerly
between regions and replays the fixed-shape pieces between them (``adaptive_eager.growing``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._task import Task, Workload

__all__ = ["Decoder", "WORKLOAD"]

VOCAB, D_MODEL, HEADS, LAYERS, BATCH, PROMPT, MAX_LEN = 128, 64, 4, 2, 2, 8, 128

Cache = list[tuple[torch.Tensor, torch.Tensor]]


class CachedBlock(nn.Module):
    """Pre-LN block whose attention appends this step's keys and values to the cache."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)))), (k, v)


class Decoder(nn.Module):
    """A small decoder-only language model returning logits and the updated cache."""

    def __init__(self, vocab: int = VOCAB, d_model: int = D_MODEL, heads: int = HEADS,
                 layers: int = LAYERS, max_len: int = MAX_LEN) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(CachedBlock(d_model, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor, positions: torch.Tensor, cache: Cache | None
                ) -> tuple[torch.Tensor, Cache]:
        x = self.tok(idx) + self.pos(positions)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if cache is None else cache[i])
            new_cache.append(kv)
        return self.head(self.ln_f(x)), new_cache


class GreedyDecode(Task):
    """Step 0 runs the prompt; step i > 0 feeds the last token and appends one position."""

    def __init__(self, model: Decoder, prompt: torch.Tensor) -> None:
        super().__init__(model)
        self.prompt = prompt
        self.cache: Cache | None = None
        self.last: torch.Tensor | None = None
        self.length = 0

    @torch.no_grad()
    def step(self, i: int) -> torch.Tensor:
        if i == 0 or self.cache is None or self.last is None:
            idx, self.length = self.prompt, 0
        else:
            idx = self.last
        positions = torch.arange(self.length, self.length + idx.shape[1], device=idx.device)
        logits, self.cache = self.model(idx, positions, self.cache)
        self.length += idx.shape[1]
        self.last = logits[:, -1].argmax(dim=-1, keepdim=True)
        return self.last


def build(device: str) -> GreedyDecode:
    torch.manual_seed(0)
    model = Decoder().to(device).eval()
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, VOCAB, (BATCH, PROMPT), generator=g).to(device)
    return GreedyDecode(model, prompt)


WORKLOAD = Workload(
    "decode", f"greedy decoding, growing KV cache: {LAYERS}-layer decoder d={D_MODEL}, "
    f"batch {BATCH}, prompt {PROMPT}, one token per step", "inference", build)
