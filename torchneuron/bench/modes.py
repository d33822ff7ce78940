"""The modes a workload runs in, and what each changes about an unmodified script.

- ``eager``: the model on ``neuron``, op by op.
- ``adaptive_cold``: adaptive eager on for the loop (enabled once the model and data are
  on the device, so set-up copies are not part of its op stream), with an empty compile
  cache.
- ``adaptive_warm``: adaptive eager on, in a new process, with the cache the cold run filled.
- ``compile``: ``torch.compile(model, backend="neuron")`` (the optimizer stays eager, as a
  user's one-line change leaves it).
- ``cpu``: the same code on plain CPU PyTorch: the reference for host cost (wall clock).
"""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["MODES", "DEPENDS_ON", "device_of", "prepare", "scope"]

MODES: tuple[str, ...] = ("eager", "adaptive_cold", "adaptive_warm", "compile", "cpu")
DEPENDS_ON: dict[str, str] = {"adaptive_warm": "adaptive_cold"}  # runs after, same cache


def device_of(mode: str) -> str:
    return "cpu" if mode == "cpu" else "neuron"


def scope(mode: str) -> contextlib.AbstractContextManager[Any]:
    """What is active for the whole run (adaptive eager for the adaptive modes)."""
    if mode.startswith("adaptive"):
        from torchneuron.bench._runtime import adaptive_scope

        return adaptive_scope()
    return contextlib.nullcontext()


def prepare(mode: str, task: Any) -> None:
    """The user's one-line change for ``mode`` (torch.compile wraps the model)."""
    if mode == "compile":
        import torch

        task.model = torch.compile(task.module, backend="neuron")
