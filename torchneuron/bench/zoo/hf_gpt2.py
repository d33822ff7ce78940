"""Hugging Face GPT-2 (``transformers``), a small configuration with random weights.

Nothing is downloaded: the model is built from a ``GPT2Config`` (``HF_HUB_OFFLINE=1`` is
set before ``transformers`` is imported). Needs the optional extra ``torchneuron[hf]``.
"""

from __future__ import annotations

import os

import torch

from ._task import TrainTask, Workload, make_batches

__all__ = ["WORKLOAD"]

VOCAB, SEQ, D_MODEL, HEADS, LAYERS, BATCH = 128, 32, 64, 4, 2, 4


def _loss(out: object, _targets: torch.Tensor) -> torch.Tensor:
    return out.loss  # type: ignore[attr-defined]


class _LabelsAsInput(torch.nn.Module):
    """Calls the HF model with ``labels=input_ids`` so the model computes its own LM loss."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> object:
        return self.model(input_ids=input_ids, labels=input_ids)


def build(device: str) -> TrainTask:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=D_MODEL, n_layer=LAYERS,
                        n_head=HEADS)
    model = _LabelsAsInput(GPT2LMHeadModel(config)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
        return tokens, tokens

    return TrainTask(model, opt, make_batches(4, batch, device), _loss, clip_norm=1.0)


WORKLOAD = Workload(
    "hf_gpt2", f"Hugging Face GPT2LMHeadModel, random weights: {LAYERS} layers, d={D_MODEL}, "
    f"seq {SEQ}, batch {BATCH}, AdamW, grad clipping", "training", build,
    requires=("transformers",))
