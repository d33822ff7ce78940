"""The GPT training step with NKI kernels: RMSNorm and FlashAttention from ``nki.lib``.

Why in the zoo: custom kernels are how a Trainium user goes past the compiler, and the
report should show them in every mode: eager (each ``nki_op`` runs its kernels on the
core, charged by their own instruction schedules), torch.compile and adaptive eager (the
ops are carried into the compiled programs as custom calls, the rest fused around them).
It is the one zoo model that imports torchneuron (``torchneuron.nki.lib``, the kernels
being the point); on ``"cpu"`` the same ops compute the same numbers without a device.

FlashAttention's tiles need the sequence in multiples of 128 and a head dim of at most
128; everything else is kept as small as the quick report needs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from torchneuron.nki import lib as nki_lib

from ._task import TrainTask, Workload, make_batches
from .gpt import lm_loss

__all__ = ["NkiGPT", "WORKLOAD"]

VOCAB, SEQ, D_MODEL, HEADS, LAYERS, BATCH = 128, 128, 64, 2, 2, 1


class RMSNorm(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nki_lib.rms_norm(x, self.weight)


class Block(nn.Module):
    """Pre-RMSNorm block: causal self-attention by the NKI FlashAttention kernels
    (forward and backward) and a SiLU MLP."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = RMSNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = RMSNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2).contiguous()
                   for z in (q, k, v))
        att = nki_lib.flash_attention(q, k, v, causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.silu(self.fc(self.norm2(x))))


class NkiGPT(nn.Module):
    """Token + position embeddings, ``layers`` identical blocks, final RMSNorm and head."""

    def __init__(self, vocab: int = VOCAB, seq: int = SEQ, d_model: int = D_MODEL,
                 heads: int = HEADS, layers: int = LAYERS) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.norm = RMSNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build(device: str) -> TrainTask:
    torch.manual_seed(0)
    model = NkiGPT().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    def batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    return TrainTask(model, opt, make_batches(4, batch, device), lm_loss)


WORKLOAD = Workload(
    "gpt_nki", f"GPT decoder with NKI kernels (nki.lib RMSNorm, FlashAttention fwd/bwd): "
    f"{LAYERS} blocks, d={D_MODEL}, seq {SEQ}, batch {BATCH}, vocab {VOCAB}, AdamW",
    "training", build)
