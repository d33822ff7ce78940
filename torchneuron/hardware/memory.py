"""HBM accounting for one NeuronCore: allocated bytes, peak, and PyTorch-style OOM errors.

Why only accounting: tensor data lives in host memory (CPU tensors); what the simulator
must reproduce is the device's *capacity*, so that a program too big for the simulated HBM
fails the way it would on the device, with ``torch.OutOfMemoryError`` naming the sizes,
and leaves the allocator exactly as it was.
"""

from __future__ import annotations

import torch

__all__ = ["MemoryTracker", "format_size"]


def format_size(nbytes: int) -> str:
    """Human-readable size the way PyTorch's OOM messages print it ("1.50 GiB")."""
    value = float(nbytes)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


class MemoryTracker:
    """Bytes allocated on one core's HBM against a capacity."""

    def __init__(self, capacity_bytes: int, device: str = "neuron:0") -> None:
        self.capacity = int(capacity_bytes)
        self.device = device
        self.allocated = 0
        self.peak = 0
        self.num_allocs = 0
        self.num_ooms = 0
        self.num_bad_frees = 0

    @property
    def free_bytes(self) -> int:
        return max(0, self.capacity - self.allocated)

    def allocate(self, nbytes: int) -> None:
        """Account ``nbytes``; raise ``torch.OutOfMemoryError`` (state unchanged) if it won't fit."""
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"cannot allocate a negative size ({nbytes} bytes)")
        if self.allocated + nbytes > self.capacity:
            self.num_ooms += 1
            raise torch.OutOfMemoryError(
                f"NeuronCore out of memory: tried to allocate {format_size(nbytes)} "
                f"({self.device} has {format_size(self.capacity)} total capacity; "
                f"{format_size(self.allocated)} already allocated; "
                f"{format_size(self.free_bytes)} free). Free tensors you no longer need, "
                "reduce the batch size, or simulate a larger device with "
                "torchneuron.hardware.set_hardware(...)."
            )
        self.allocated += nbytes
        self.num_allocs += 1
        if self.allocated > self.peak:
            self.peak = self.allocated

    def free(self, nbytes: int) -> None:
        """Release ``nbytes``. Never raises: it runs from tensor finalizers, possibly after
        ``core.reset()``; freeing more than is allocated clamps at 0 and is counted in
        ``num_bad_frees`` so tests can assert the accounting stayed balanced."""
        nbytes = int(nbytes)
        if nbytes < 0 or nbytes > self.allocated:
            self.num_bad_frees += 1
            nbytes = max(0, min(nbytes, self.allocated))
        self.allocated -= nbytes

    def reset_peak(self) -> None:
        """Peak restarts from what is allocated now (like reset_peak_memory_stats)."""
        self.peak = self.allocated

    def __repr__(self) -> str:
        return (
            f"MemoryTracker({self.device}: {format_size(self.allocated)} allocated, "
            f"peak {format_size(self.peak)}, capacity {format_size(self.capacity)})"
        )
