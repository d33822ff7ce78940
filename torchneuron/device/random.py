"""The neuron device's random number generators.

Each device index has its own generator (a CPU-algorithm ``torch.Generator``),
seeded by ``torch.neuron.manual_seed`` and by ``torch.manual_seed`` (which calls
``torch.neuron.manual_seed_all``). Random aten ops on the device run the CPU
kernel with the CPU default generator's state swapped for the device's, so eager
ops, CPU fallbacks and compiled graphs that draw their random inputs the same way
all see the same stream: under one seed, the neuron device draws exactly the
numbers a CPU run seeded the same way draws.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["generator", "rng_state_swapped", "manual_seed", "manual_seed_all"]

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
