"""``nn.DataParallel`` on ``neuron`` refuses with a message that says what to do.

Why: with ``neuron`` the current accelerator, ``nn.DataParallel(model)`` spreads the
model over every neuron device and scatters, broadcasts and gathers through
``torch.nn.parallel.comm``, whose kernels (``torch._C._scatter``, ...) exist only in
CUDA builds: a user moving CUDA code got ``AttributeError: module 'torch._C' has no
attribute '_scatter'``. The device does not run replicas in threads (the simulated
core's clock and queues are per process, in issue order), so these entry points raise
``NotImplementedError`` naming the way out. Installed only where the build lacks them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["install_data_parallel_refusal"]

_COMM_KERNELS = ("_scatter", "_scatter_out", "_gather", "_gather_out", "_broadcast",
                 "_broadcast_out", "_broadcast_coalesced")


def _refusal(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"nn.DataParallel (torch.nn.parallel.comm, torch._C.{name}) is not supported on "
            "the neuron device: it needs CUDA's multi-device kernels and runs replicas in "
            "threads. Run the model on one device instead (model.to('neuron'), without "
            "nn.DataParallel).")

    refuse.__name__ = name
    return refuse


def install_data_parallel_refusal() -> None:
    """Give ``torch._C`` the communication entry points it lacks (idempotent)."""
    for name in _COMM_KERNELS:
        if not hasattr(torch._C, name):
            setattr(torch._C, name, _refusal(name))
