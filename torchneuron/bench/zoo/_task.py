"""What a workload is to the runner: a module, the callable a step uses, and ``step``.

Why the split between ``module`` and ``model``: a mode may replace the callable the step
goes through (``torch.compile(module)``) while parameters, optimizer and data stay the
same objects, exactly as a user edits one line of a training script. Workload code is
ordinary PyTorch: it knows nothing of torchneuron beyond the device string it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = ["Task", "TrainTask", "Workload", "make_batches"]


class Task:
    """One workload built on one device. Subclasses define ``step``."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.model: Callable[..., Any] = module  # a mode may wrap it (torch.compile)

    def step(self, i: int) -> torch.Tensor | Sequence[torch.Tensor]:
        """Run step ``i``; return what is compared across modes (a loss, logits, tokens)."""
        raise NotImplementedError

    def state(self) -> dict[str, torch.Tensor]:
        """Parameters and buffers after the run (compared across modes, too)."""
        return {k: v.detach() for k, v in self.module.state_dict().items()}


class TrainTask(Task):
    """A training step: zero_grad, forward, loss, backward, optional clipping, optimizer step."""

    def __init__(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
        loss_fn: Callable[[Any, torch.Tensor], torch.Tensor],
        clip_norm: float | None = None,
    ) -> None:
        super().__init__(module)
        self.optimizer = optimizer
        self.batches = list(batches)
        self.loss_fn = loss_fn
        self.clip_norm = clip_norm

    def step(self, i: int) -> torch.Tensor:
        x, y = self.batches[i % len(self.batches)]
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        if self.clip_norm is not None:
            nn.utils.clip_grad_norm_(self.module.parameters(), self.clip_norm)
        self.optimizer.step()
        return loss.detach()


@dataclass(frozen=True)
class Workload:
    """A named zoo entry. ``build(device)`` returns a fresh Task with seeded weights and data;
    ``requires`` names optional packages without which it cannot run."""

    name: str
    description: str
    kind: str  # "training" or "inference"
    build: Callable[[str], Task]
    requires: tuple[str, ...] = field(default=())


def make_batches(
    n: int, make: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]], device: str,
    seed: int = 1,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` batches drawn on CPU from a private generator (so building data never disturbs
    the global RNG a mode's dropout draws from), then moved to ``device``."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x, y = make(g)
        out.append((x.to(device), y.to(device)))
    return out
