"""A transformer encoder serving requests of varying batch sizes (inference, no grad).

One step serves one round of requests with the batch sizes in ``ROUND``; each response
is read back to the host as a server would, so every request ends at a host sync.
"""

from __future__ import annotations

import torch
from torch import nn

from ._task import Task, Workload

__all__ = ["EncoderServer", "WORKLOAD"]

D_MODEL, HEADS, FF, LAYERS, SEQ = 64, 4, 128, 2, 16
ROUND = (4, 1, 7, 16)


class EncoderServer(Task):
    """``nn.TransformerEncoder`` (batch_first) in eval mode; mean-pooled embeddings out."""

    def __init__(self, model: nn.Module, requests: list[torch.Tensor]) -> None:
        super().__init__(model)
        self.requests = requests

    @torch.no_grad()
    def step(self, i: int) -> list[torch.Tensor]:
        out = []
        for x in self.requests:
            out.append(self.model(x).mean(dim=1).cpu())
        return out


def build(device: str) -> EncoderServer:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False).to(device).eval()
    g = torch.Generator().manual_seed(1)
    requests = [torch.randn(b, SEQ, D_MODEL, generator=g).to(device) for b in ROUND]
    return EncoderServer(model, requests)


WORKLOAD = Workload(
    "encoder", f"nn.TransformerEncoder ({LAYERS} layers, d={D_MODEL}) serving batches of "
    f"{', '.join(map(str, ROUND))} per step", "inference", build)
