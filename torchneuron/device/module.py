"""``torch.neuron``: the device-module API, mirroring the ``torch.cuda`` subset people use.

Times are *simulated*: events read the device timeline of the simulated
NeuronCore, never the wall clock, so the same program reports the same
milliseconds on every run and every machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from torchneuron.device import random as _random
from torchneuron.device.current import current_device, device_index, set_device
from torchneuron.device.streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
from torchneuron.hardware import device_count as _hw_device_count
from torchneuron.hardware import get_core
from torchneuron.hardware.collectives import peek_collective_queue

__all__ = [
    "is_available",
    "is_initialized",
    "device_count",
    "current_device",
    "set_device",
    "device",
    "synchronize",
    "Event",
    "memory_allocated",
    "max_memory_allocated",
    "reset_peak_memory_stats",
    "memory_stats",
    "memory_summary",
    "mem_get_info",
    "memory_reserved",
    "max_memory_reserved",
    "empty_cache",
    "get_device_name",
    "get_device_properties",
    "get_device_capability",
    "NeuronDeviceProperties",
    "Stream",
    "StreamContext",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
]

# The device is up from ``import torchneuron`` on. ``torch.utils.checkpoint`` reads this
# flag (as ``torch.cuda._initialized``) to decide whether to save the device's RNG state
# for the recomputation: without it a checkpointed dropout drew a new mask in the
# backward, and the gradients were wrong.
_initialized = True


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return _hw_device_count()


_index = device_index  # (the name this module's callers use)


class device:
    """Context manager that changes the current neuron device."""

    def __init__(self, dev: Any) -> None:
        self.index = _index(dev)
        self.prev = current_device()

    def __enter__(self) -> None:
        self.prev = current_device()
        set_device(self.index)

    def __exit__(self, *exc: object) -> None:
        set_device(self.prev)


def synchronize(dev: Any = None) -> None:
    """Block the (simulated) host until device ``dev`` has finished all enqueued work."""
    core = get_core(_index(dev))
    core.notify_sync("synchronize")
    core.synchronize()
    q = peek_collective_queue(core)
    if q is not None and q.stream_ready:  # collectives side streams still wait for
        core.wait_event(max(q.stream_ready.values()))
    side = core.timeline.side
    if side is not None:  # side streams' work reserved past the compute queue
        core.wait_event(side.latest())


def memory_allocated(dev: Any = None) -> int:
    return get_core(_index(dev)).memory.allocated


def max_memory_allocated(dev: Any = None) -> int:
    return get_core(_index(dev)).memory.peak


def reset_peak_memory_stats(dev: Any = None) -> None:
    get_core(_index(dev)).memory.reset_peak()


def memory_stats(dev: Any = None) -> dict[str, int]:
    """The ``torch.cuda.memory_stats`` keys the device can fill (reserved == allocated)."""
    mem = get_core(_index(dev)).memory
    return {
        "allocated_bytes.all.current": mem.allocated,
        "allocated_bytes.all.peak": mem.peak,
        "reserved_bytes.all.current": mem.allocated,
        "reserved_bytes.all.peak": mem.peak,
        "capacity_bytes": mem.capacity,
    }


def mem_get_info(dev: Any = None) -> tuple[int, int]:
    """``(free, total)`` bytes of the core's simulated HBM, as ``torch.cuda.mem_get_info``."""
    mem = get_core(_index(dev)).memory
    return mem.capacity - mem.allocated, mem.capacity


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A printable table of the memory counters, for code that prints
    ``torch.cuda.memory_summary()``; the device has one pool and no caching allocator, so
    the table has one row per counter (``abbreviated`` changes nothing)."""
    index = _index(device)
    mem = get_core(index).memory
    rows = [
        ("Allocated memory", mem.allocated, mem.peak),
        ("Reserved memory", mem.allocated, mem.peak),
        ("Free memory", mem.capacity - mem.allocated, mem.capacity - mem.peak),
    ]
    width = 75
    lines = ["=" * width,
             f" neuron memory summary, device {index} (simulated HBM: {_mib(mem.capacity)})",
             "-" * width,
             f" {'Metric':<30}| {'Cur Usage':>20} | {'Peak Usage':>20}",
             "-" * width]  # fmt: skip
    lines += [f" {name:<30}| {_mib(cur):>20} | {_mib(peak):>20}" for name, cur, peak in rows]
    lines.append("=" * width)
    return "\n".join(lines) + "\n"


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.2f} MiB" if nbytes >= 2**20 else f"{nbytes} B"


def memory_reserved(dev: Any = None) -> int:
    """Bytes held for tensors. There is no caching allocator: the same as allocated."""
    return memory_allocated(dev)


def max_memory_reserved(dev: Any = None) -> int:
    return max_memory_allocated(dev)


def empty_cache() -> None:
    """Release cached blocks. The simulated HBM frees a buffer with its last tensor, so
    nothing is ever cached: a no-op, kept so CUDA code runs unchanged."""


@dataclass(frozen=True)
class NeuronDeviceProperties:
    """What ``torch.cuda.get_device_properties`` reports, for a simulated NeuronCore."""

    name: str
    total_memory: int  # bytes of HBM this core may allocate
    core_version: str
    hardware: str  # the profile, e.g. "trn2"
    multi_processor_count: int  # NeuronCores per chip
    major: int = 0
    minor: int = 0


def get_device_properties(dev: Any = None) -> NeuronDeviceProperties:
    core = get_core(_index(dev))
    p = core.profile
    return NeuronDeviceProperties(
        name=f"{p.core_version} (simulated {p.name})",
        total_memory=core.memory.capacity,
        core_version=p.core_version,
        hardware=p.name,
        multi_processor_count=p.cores_per_chip,
    )


def get_device_name(dev: Any = None) -> str:
    return get_device_properties(dev).name


def get_device_capability(dev: Any = None) -> tuple[int, int]:
    props = get_device_properties(dev)
    return props.major, props.minor


def _rng_observed(index: int) -> None:
    """The host is about to read or replace a device generator's state: a sync point.

    Why: adaptive eager defers a region's random ops and draws their numbers when the
    region's executable runs; a state read (``torch.utils.checkpoint``, ``fork_rng``) or
    a reseed in the middle of the region would otherwise see the state from before those
    draws, or change the stream they draw from."""
    get_core(index).notify_sync("rng-state")


def manual_seed(seed: int) -> None:
    _rng_observed(current_device())
    _random.manual_seed(seed, current_device())


def manual_seed_all(seed: int) -> None:
    _rng_observed(current_device())
    _random.manual_seed_all(seed, device_count())


def seed() -> None:
    _rng_observed(current_device())
    _random.generator(current_device()).seed()


def initial_seed() -> int:
    return _random.generator(current_device()).initial_seed()


def get_rng_state(dev: Any = None) -> torch.Tensor:
    _rng_observed(_index(dev))
    return _random.generator(_index(dev)).get_state()


def set_rng_state(state: torch.Tensor, dev: Any = None) -> None:
    _rng_observed(_index(dev))
    _random.generator(_index(dev)).set_state(state)


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]
