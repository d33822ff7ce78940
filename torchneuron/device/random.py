"""The neuron device's random number generators.

Each device index has its own generator (a CPU-algorithm ``torch.Generator``),
seeded by ``torch.neuron.manual_seed`` and by ``torch.manual_seed`` (which calls
``torch.neuron.manual_seed_all``). Random aten ops on the device run the CPU
kernel with the CPU default generator's state swapped for the device's, so eager
ops, CPU fallbacks and compiled graphs that draw their random inputs the same way
all see the same stream: under one seed, the neuron device draws exactly the
numbers a CPU run seeded the same way draws.

``torch.Generator(device="neuron")`` makes an explicit generator for the device
(see the comment above ``Generator``); a random op on the device refuses a generator
of another device, as CUDA does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from torchneuron.device.current import device_index

__all__ = [
    "generator",
    "rng_state_swapped",
    "manual_seed",
    "manual_seed_all",
    "Generator",
    "NeuronGenerator",
    "check_generator",
    "install_generator",
]

_DEFAULT_SEED = 67280421310721  # torch's default CPU seed
_generators: dict[int, torch.Generator] = {}


def generator(index: int = 0) -> torch.Generator:
    gen = _generators.get(index)
    if gen is None:
        gen = torch.Generator(device="cpu")
        gen.manual_seed(_DEFAULT_SEED)
        _generators[index] = gen
    return gen


@contextlib.contextmanager
def rng_state_swapped(index: int = 0) -> Iterator[None]:
    """Run the body with the CPU default generator holding device ``index``'s state."""
    gen = generator(index)
    cpu_default = torch.default_generator
    saved = cpu_default.get_state()
    cpu_default.set_state(gen.get_state())
    try:
        yield
    finally:
        gen.set_state(cpu_default.get_state())
        cpu_default.set_state(saved)


def manual_seed(seed: int, index: int = 0) -> None:
    generator(index).manual_seed(int(seed))


def manual_seed_all(seed: int, device_count: int) -> None:
    for i in range(device_count):
        manual_seed(seed, i)


# --- torch.Generator(device="neuron") ---------------------------------------------------------
#
# PyTorch asks the PrivateUse1 hooks for a new generator, which Python hooks cannot
# provide. ``torch.Generator`` is therefore replaced by a subclass that builds neuron
# generators itself (a CPU-algorithm generator whose ``device`` is ``neuron:N``, so
# seeded the same it draws the numbers CPU draws) and defers every other device to
# PyTorch's constructor; ``isinstance(g, torch.Generator)`` holds for all generators.
#
# An op reaches dispatch with a fresh Python wrapper of the generator, not the object
# the user made. PyTorch reuses a generator's wrapper while one is alive, so each
# neuron generator keeps the wrapper PyTorch made for it (``_alias``): dispatch then
# tells neuron generators from CPU ones by identity (``check_generator``).

_TorchGenerator = torch._C.Generator
_aliases: dict[int, int] = {}  # id(wrapper seen by ops) -> device index


class _GeneratorMeta(type(_TorchGenerator)):  # type: ignore[misc]
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, _TorchGenerator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _TorchGenerator)


class NeuronGenerator(_TorchGenerator):
    """A generator for ``neuron:N`` (``torch.Generator(device="neuron")``)."""

    _index: int
    _alias: torch.Generator

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("neuron", self._index)

    def __del__(self) -> None:
        _aliases.pop(id(getattr(self, "_alias", None)), None)

    def __repr__(self) -> str:
        return f"<torch.Generator object for {self.device}>"


_lib: torch.library.Library | None = None
_captured: list[torch.Generator] = []


def _capture_impl(gen: torch.Generator) -> None:
    _captured.append(gen)


def _seen_by_ops(gen: torch.Generator) -> torch.Generator:
    """The Python wrapper an op receives for ``gen``: made now by passing ``gen`` through
    a do-nothing op of our own, and kept alive by the caller so PyTorch reuses it."""
    global _lib
    if _lib is None:
        _lib = torch.library.Library("torchneuron_rng", "DEF")
        _lib.define("capture(Generator? gen) -> ()")
        _lib.impl("capture", _capture_impl, "CompositeExplicitAutograd")
    torch.ops.torchneuron_rng.capture(gen)
    return _captured.pop()


class Generator(_TorchGenerator, metaclass=_GeneratorMeta):
    """``torch.Generator``, also for ``device="neuron"`` (see the comment above)."""

    def __new__(cls, device: Any = None) -> torch.Generator:  # type: ignore[misc]
        if device is None or torch.device(device).type != "neuron":
            return _TorchGenerator() if device is None else _TorchGenerator(device)
        gen = _TorchGenerator.__new__(NeuronGenerator, "cpu")
        gen.manual_seed(_DEFAULT_SEED)
        gen._index = device_index(device)
        gen._alias = _seen_by_ops(gen)
        _aliases[id(gen._alias)] = gen._index
        return gen


def check_generator(gen: Any, index: int) -> None:
    """Refuse a generator of another device for an op on ``neuron:index`` (as CUDA does)."""
    if gen is None:
        return
    if id(gen) not in _aliases:
        raise RuntimeError(
            f"Expected a 'neuron' device type for generator but found '{gen.device.type}'; "
            "create it with torch.Generator(device='neuron')"
        )


def install_generator() -> None:
    """Make ``torch.Generator(device="neuron")`` work (idempotent)."""
    torch.Generator = Generator  # type: ignore[misc]
