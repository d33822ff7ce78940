"""Composite ops whose branch for PrivateUse1 skips checks the CPU makes.

Why: ``F.one_hot`` checks on the CPU that its input is int64 and its classes in range
("Class values must be non-negative.", "... smaller than num_classes."), but for
PrivateUse1 it skips them and computes ``t.unsqueeze(-1) == arange(num_classes)``, so an
out-of-range class on ``neuron`` gave a row of zeros silently (while torch.compile, with
its index checks, raised CPU's error). A kernel at the op's ``AutogradPrivateUse1`` key,
which runs before anything else, checks the values on the host, as the simulator's
other index checks do (no device work is charged), then runs the same composite, so
the device sees the ops it saw before. A buffer not computed yet (adaptive eager's
pending value) or a traced one is not read.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.device.tensor import NeuronTensor

__all__ = ["install"]

_lib: torch.library.Library | None = None
_ONE_HOT = torch.ops.aten.one_hot.default


def _host_values(t: Any) -> torch.Tensor | None:
    if not isinstance(t, NeuronTensor) or t._pending is not None:
        return None
    b = t._buffer
    return b if type(b) is torch.Tensor and b.numel() else None


def _one_hot(self: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
    """CPU's checks, in CPU's order, then PyTorch's composite for the device."""
    if self.dtype != torch.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if self.numel() == 0 and num_classes <= 0:
        raise RuntimeError("Can not infer total number of classes from empty tensor.")
    values = _host_values(self)
    if values is not None:
        if int(values.min()) < 0:
            raise RuntimeError("Class values must be non-negative.")
        if num_classes != -1 and int(values.max()) >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    return _ONE_HOT.decompose(self, num_classes)


def install() -> None:
    """Register the checking kernels (idempotent)."""
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
        _lib.impl("one_hot", _one_hot, "AutogradPrivateUse1")
