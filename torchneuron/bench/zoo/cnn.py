"""Small CNN with BatchNorm (running-stat buffers updated in place) and max pooling."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._task import TrainTask, Workload, make_batches

__all__ = ["ConvNet", "WORKLOAD"]

BATCH, CHANNELS, SIZE, CLASSES = 8, 3, 16, 10


class ConvNet(nn.Module):
    """(Conv -> BatchNorm -> ReLU -> MaxPool) x 2, global average pool, linear head."""

    def __init__(self, channels: int = CHANNELS, classes: int = CLASSES) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.head = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.head(x.mean(dim=(2, 3)))


def build(device: str) -> TrainTask:
    torch.manual_seed(0)
    model = ConvNet().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(BATCH, CHANNELS, SIZE, SIZE, generator=g)
        return x, torch.randint(0, CLASSES, (BATCH,), generator=g)

    return TrainTask(model, opt, make_batches(4, batch, device), F.cross_entropy)


WORKLOAD = Workload("cnn", "CNN: 2x (conv3x3, BatchNorm, ReLU, maxpool), 8x3x16x16, SGD momentum",
                    "training", build)
