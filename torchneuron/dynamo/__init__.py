"""The ``torch.compile`` backend named ``neuron``.

Owns: the Dynamo backend (registration, AOTAutograd wiring, eager fallback per graph),
and keeping Dynamo out of torchneuron's runtime (``skip``).
Imports ``torchneuron.compiler``, ``torchneuron.device`` and ``torchneuron.hardware``.
The compiler is imported on first use, so ``import torchneuron`` stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["neuron_backend", "register"]


def neuron_backend(gm: Any, example_inputs: list[Any], **kwargs: Any) -> Callable:
    """The ``neuron`` torch.compile backend (see ``torchneuron.dynamo.backend``)."""
    from torchneuron.dynamo.backend import neuron_backend as backend

    return backend(gm, example_inputs, **kwargs)


def register() -> None:
    """Register ``neuron`` with Dynamo's backend registry (idempotent).

    Importing ``torch._dynamo`` costs seconds, so ``import torchneuron`` registers
    only when Dynamo is already loaded; otherwise the ``torch_dynamo_backends``
    entry point in pyproject.toml lets Dynamo find the backend on first use.
    """
    import sys

    from torchneuron.dynamo.skip import skip_runtime_when_dynamo_loads

    skip_runtime_when_dynamo_loads()
    if "torch._dynamo" not in sys.modules:
        return
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "neuron" not in _BACKENDS:
        register_backend(name="neuron")(neuron_backend)
