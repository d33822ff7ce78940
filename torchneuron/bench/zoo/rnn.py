"""GRU sequence model (``nn.GRU``) trained with Adam: recurrence, gates, a loop over time."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._task import TrainTask, Workload, make_batches

__all__ = ["GRURegressor", "WORKLOAD"]

BATCH, SEQ, FEATURES, HIDDEN = 8, 12, 16, 32


class GRURegressor(nn.Module):
    """A one-layer ``nn.GRU`` over the sequence; the last hidden state predicts a target."""

    def __init__(self, features: int = FEATURES, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.gru = nn.GRU(features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.head(out[:, -1]).squeeze(-1)


def build(device: str) -> TrainTask:
    torch.manual_seed(0)
    model = GRURegressor().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(BATCH, SEQ, FEATURES, generator=g)
        return x, x.sum(dim=(1, 2)) / SEQ

    return TrainTask(model, opt, make_batches(4, batch, device), F.mse_loss)


WORKLOAD = Workload("gru", f"nn.GRU sequence regressor: seq {SEQ}, hidden {HIDDEN}, Adam",
                    "training", build)
