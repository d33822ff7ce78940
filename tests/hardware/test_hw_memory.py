"""HBM accounting: OOM is torch.OutOfMemoryError naming sizes, and changes nothing."""

from __future__ import annotations

import pytest
import torch

from torchneuron.hardware import MemoryTracker, get_core

GiB = 1024**3


def test_oom_message_and_state_unchanged() -> None:
    mem = MemoryTracker(12 * GiB, device="neuron:0")
    mem.allocate(GiB + GiB // 2)
    with pytest.raises(torch.OutOfMemoryError) as info:
        mem.allocate(20 * GiB)
    msg = str(info.value)
    for part in ("20.00 GiB", "12.00 GiB total capacity", "1.50 GiB already allocated",
                 "10.50 GiB free", "neuron:0"):  # fmt: skip
        assert part in msg
    assert mem.allocated == GiB + GiB // 2 and mem.peak == GiB + GiB // 2
    mem.allocate(10 * GiB + GiB // 2)  # exactly fills the device
    assert mem.free_bytes == 0


def test_peak_and_reset_peak() -> None:
    mem = MemoryTracker(1_000)
    mem.allocate(600)
    mem.free(500)
    assert (mem.allocated, mem.peak) == (100, 600)
    mem.reset_peak()
    assert mem.peak == 100
    mem.allocate(50)
    assert mem.peak == 150


def test_over_free_clamps_and_is_counted() -> None:
    mem = MemoryTracker(1_000)
    mem.allocate(10)
    mem.free(20)
    assert mem.allocated == 0 and mem.num_bad_frees == 1


def test_core_capacity_is_per_core_hbm() -> None:
    assert get_core(0).memory.capacity == 12 * GiB
