"""Device moves inside a prepared graph are identities: every value is a CPU buffer.

A compiled graph computes on the buffers of neuron tensors, which live on the host
(the simulated HBM). AOTAutograd graphs still carry the device moves the user wrote,
e.g. ``x + torch.tensor([1., 2.]).to(x.device)`` becomes ``prims.device_put(c,
neuron:0)``, which Torch-MLIR cannot lower. Within the graph such a move changes no
value, so prepare decomposes it to a copy. Which device each *output* is reported on
is decided outside the graph (AOTAutograd wraps the buffers it returns), so nothing a
user sees changes. Used by prepare only: AOTAutograd must still see the real devices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["DEVICE_MOVE_DECOMPOSITIONS"]


def _device_put(x: torch.Tensor, device: Any, non_blocking: bool = False) -> torch.Tensor:
    return torch.ops.aten.clone.default(x)


DEVICE_MOVE_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.prims.device_put.default: _device_put,
}
