"""Distributed training on simulated NeuronCores: the ``torch.distributed`` backend "neuron".

Owns: the ``neuron`` process group (``backend``: PyTorch's collectives over an inner gloo
group, every one placed on the ranks' simulated clocks), the clock agreement between ranks
(``clock``), point-to-point (``p2p``), what FSDP2 needs from a neuron tensor's storage
(``fsdp``) and the nccom-test style table (``python -m torchneuron.distributed.collectives``).
One process per simulated NeuronCore, started by ``torchrun``; nothing here launches ranks.

May import: torch, ``torchneuron.hardware`` (the collectives' cost model lives in
``hardware.collectives``), ``torchneuron.device``. Never the compiler, adaptive eager or the
cache: it sits above device and dispatch, beside the compiler.

``import torchneuron`` calls ``register()``: ``dist.init_process_group("neuron")`` then works,
and so does ``init_process_group()`` with no backend named when the neuron device is the
current accelerator (PyTorch picks the backend registered for the accelerator's device).
"""

from __future__ import annotations

import torch.distributed as dist

__all__ = ["register", "stats", "NeuronProcessGroup"]

_registered = False


def register() -> None:
    """Register the ``neuron`` backend for the ``neuron`` device (idempotent)."""
    global _registered
    if _registered or not dist.is_available():
        return
    if "neuron" not in dist.Backend.backend_list:
        # ``devices`` must be a list: a bare string is read character by character
        dist.Backend.register_backend("neuron", create_process_group, extended_api=True,
                                      devices=["neuron"])
    _registered = True


def create_process_group(*args: object, **kwargs: object) -> object:
    """The backend's factory, importing the group's module only when a group is made:
    ``import torchneuron`` must not load Dynamo (the group's methods are wrapped in
    ``torch.compiler.disable``) nor ``torch.distributed``'s heavier modules."""
    from torchneuron.distributed.backend import create_process_group as create

    return create(*args, **kwargs)


def stats(index: int = 0) -> dict:
    """This rank's collective figures on ``neuron:index`` (count, simulated ns, the part
    the compute queue waited for, the overlapped share); see ``clock.stats``."""
    from torchneuron.distributed.clock import stats as _stats

    return _stats(index)


def __getattr__(name: str) -> object:
    if name == "NeuronProcessGroup":
        from torchneuron.distributed.backend import NeuronProcessGroup

        return NeuronProcessGroup
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
