"""Variants from one start point: which region the stream is becomes known only ops later.

A GPT-style loop (pre-LayerNorm blocks, causal attention, dropout, tied head, AdamW,
gradient clipping) splits into regions several of which begin with the same op: the
block's forward followed by the next block's first ops, and the last block's forward
followed by the final LayerNorm; the first block's backward and the next ones; AdamW's
update of a block and of the parameters outside the blocks. A replay that started as one
of them and finds the next op is another's goes on as that one (or ends as the one that
stops there) instead of side-exiting, so every step replays whole and matches eager.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import torchneuron.adaptive_eager as ae
from tests.adaptive_eager.harness import assert_same, clone_to, run, state

VOCAB, SEQ, D, HEADS, LAYERS, STEPS = 32, 8, 16, 2, 3, 13


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, HEADS, d // HEADS).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, dim=-1))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.drop(self.proj(att.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(SEQ, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _loop(model: nn.Module, per_step: list[tuple[int, int]] | None = None):
    def loop(device: str) -> dict:
        m = clone_to(model, device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
        g = torch.Generator().manual_seed(1)
        data = [torch.randint(0, VOCAB, (2, SEQ + 1), generator=g).to(device) for _ in range(2)]
        losses = []
        for step in range(STEPS):
            before = dict(ae.stats()) if per_step is not None else None
            tok = data[step % 2]
            loss = F.cross_entropy(m(tok[:, :-1]).flatten(0, 1), tok[:, 1:].flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            if before is not None:
                after = ae.stats()
                per_step.append((after["ops_recorded"] - before["ops_recorded"],
                                 after["side_exits"] - before["side_exits"]))
        return {"losses": torch.tensor(losses), **state(m)}
    return loop


def test_gpt_loop_reaches_a_steady_state_of_whole_replayed_steps() -> None:
    torch.manual_seed(0)
    model = GPT()
    eager = run(_loop(model), "neuron")
    per_step: list[tuple[int, int]] = []
    adaptive = run(_loop(model, per_step), "neuron", adaptive=True)
    assert_same(eager, adaptive, rtol=1e-4, atol=1e-5)
    # the last steps run no op eagerly and leave no region early
    assert per_step[-3:] == [(0, 0)] * 3, (per_step, ae.explain())
    assert ae.stats()["variant_switches"] > 0
