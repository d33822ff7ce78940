"""A device-bound training step: a d_model 1024 decoder on 1024 tokens per step.

Why this model: every other zoo model is host-bound on the simulated core (its 15 us
dispatch and 10 us launch per op fill the step while the engines idle), so a report of
those only measures host overhead. Here a d=1024 linear over 1024 tokens is a 1024x1024x
1024 (or x4096) bf16 matmul, which keeps TensorE busy at least as long as its dispatch,
and the elementwise ops and AdamW's update touch megabytes each: the engines, not the
host, set the step time, so the report shows what fusion gains when the device is the
limit.

The width and the tokens per step are what make it device-bound; layers and vocabulary
are kept small because the simulator computes every number on this machine's CPU (see
``LAYERS``). Why float32 and not bf16 autocast: the simulator computes a bf16 matmul with
CPU PyTorch's bf16 kernel, which on a CPU without native bf16 (this AVX2 machine) takes
2.8 s for one 1024x1024x1024 product against 0.05 s in float32, so a bf16 step would cost
minutes of wall time. Float32 is the more device-bound choice anyway (TensorE runs fp32 at
a quarter of its bf16 rate). ``BF16GPT(autocast=torch.bfloat16)`` is the same model under
``torch.autocast(<device>, torch.bfloat16)``, for a machine where that is affordable:
attention, LayerNorm and the loss are written so that PyTorch's CPU autocast list and its
accelerator list (which ``torch.autocast("neuron")`` follows) cast the same ops (only
linears and matmuls run in bf16; softmax and the loss read float32), so the same code
gives the same numbers on ``"cpu"`` and on ``"neuron"``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._task import TrainTask, Workload, make_batches
from .gpt import lm_loss

__all__ = ["WideGPT", "WORKLOAD"]

# 1024 tokens per step (BATCH * SEQ) at d_model 1024. LAYERS and VOCAB set the CPU cost
# of a step, not whether it is device-bound (each layer is the same mix of ops): with two
# layers an eager step was 21.3 ms simulated, 101.6% device busy, and 5 s of wall time
# on this 2-core machine (17 s under load); one layer halves that.
VOCAB, SEQ, D_MODEL, HEADS, LAYERS, BATCH = 1024, 256, 1024, 16, 1, 4


class Block(nn.Module):
    """Pre-LayerNorm block: causal self-attention written out (scores, float32 softmax,
    weighted sum) and a GELU MLP of width 4 * d_model."""

    def __init__(self, d_model: int, heads: int, seq: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).tril(),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = d // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, h).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)).float() * h ** -0.5
        scores = scores.masked_fill(~self.causal[:t, :t], float("-inf"))
        att = scores.softmax(dim=-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class WideGPT(nn.Module):
    """Token + position embeddings, ``layers`` identical blocks, final LayerNorm and head;
    with ``autocast`` (a dtype) the forward runs under ``torch.autocast(<device>,
    autocast)``; float32 logits out."""

    def __init__(self, vocab: int = VOCAB, seq: int = SEQ, d_model: int = D_MODEL,
                 heads: int = HEADS, layers: int = LAYERS,
                 autocast: torch.dtype | None = None) -> None:
        super().__init__()
        self.autocast = autocast
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        with torch.autocast(idx.device.type, dtype=self.autocast or torch.bfloat16,
                            enabled=self.autocast is not None):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.tok(idx) + self.pos(pos)
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x)).float()


def build(device: str) -> TrainTask:
    torch.manual_seed(0)
    model = WideGPT().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    return TrainTask(model, opt, make_batches(4, batch, device), lm_loss)


WORKLOAD = Workload(
    "gpt_wide", f"device-bound GPT decoder (float32): {LAYERS} block(s), "
    f"d={D_MODEL}, {BATCH * SEQ} tokens per step (batch {BATCH} x seq {SEQ}), vocab {VOCAB}, "
    "AdamW", "training", build)
