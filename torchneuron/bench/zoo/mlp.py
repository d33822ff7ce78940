"""Residual MLP trained with SGD + momentum: the launch-bound eager case (many small ops)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._task import TrainTask, Workload, make_batches

__all__ = ["ResidualMLP", "WORKLOAD"]

D_IN, WIDTH, DEPTH, CLASSES, BATCH = 64, 128, 3, 10, 32


class ResidualMLP(nn.Module):
    """Input projection, ``depth`` residual blocks (LayerNorm -> Linear -> GELU -> Linear), head."""

    def __init__(self, d_in: int = D_IN, width: int = WIDTH, depth: int = DEPTH,
                 classes: int = CLASSES) -> None:
        super().__init__()
        self.inp = nn.Linear(d_in, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(),
                          nn.Linear(2 * width, width))
            for _ in range(depth)
        )
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


def build(device: str) -> TrainTask:
    torch.manual_seed(0)
    model = ResidualMLP().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(BATCH, D_IN, generator=g), torch.randint(0, CLASSES, (BATCH,),
                                                                    generator=g)

    return TrainTask(model, opt, make_batches(4, batch, device), F.cross_entropy)


WORKLOAD = Workload("mlp", "residual MLP (3 blocks, width 128), SGD momentum, batch 32",
                    "training", build)
