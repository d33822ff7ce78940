"""Memory accounting of eager results: one token per storage, shared by its wrappers.

Why: every wrapper over a storage holds the same token, and Python's reference count
stands in for the count of wrappers; these tests pin that the storage is counted once,
kept while any wrapper (a view, a view of a view) lives, and released with the last,
also when the garbage collector (not the reference count) frees it.
"""

from __future__ import annotations

import gc

import torch

from torchneuron.device import buffers
from torchneuron.device.tensor import wrap_buffer
from torchneuron.hardware import get_core


def test_a_storage_is_counted_once_and_released_with_its_last_wrapper() -> None:
    gc.collect()
    memory = get_core(0).memory
    before, live = memory.allocated, buffers.live_storages()
    x = torch.ones(256, device="neuron") * 2  # an eager result: a new storage
    nbytes = x.cpu().untyped_storage().nbytes()
    v = x.view(16, 16)
    t = v.t()
    assert memory.allocated == before + nbytes
    assert buffers.live_storages() == live + 1
    del x, v
    assert memory.allocated == before + nbytes  # ``t`` still holds it
    assert torch.equal(t.cpu(), torch.full((16, 16), 2.0))
    del t
    assert memory.allocated == before
    assert buffers.live_storages() == live


def test_a_storage_freed_by_the_garbage_collector_is_released() -> None:
    gc.collect()
    memory = get_core(0).memory
    before, live = memory.allocated, buffers.live_storages()

    t = torch.ones(64, device="neuron") + 1
    t.cycle = t  # the wrapper (and so its token) dies only in a collection
    assert memory.allocated > before
    del t
    assert memory.allocated > before
    gc.collect()
    assert memory.allocated == before
    assert buffers.live_storages() == live
    assert memory.num_bad_frees == 0


def test_a_held_storage_is_counted_once_until_released_and_a_view_of_it_takes_it_over() -> None:
    """``buffers.Holding``: what a run of deferred ops holds without a wrapper (a dict
    entry, no token) is counted until ``release``; a wrapper over a view of it takes a
    token for it, counted once, that outlives the holding."""
    gc.collect()
    memory = get_core(0).memory
    before, live = memory.allocated, buffers.live_storages()
    a, b = torch.ones(64), torch.ones(32)
    nbytes = a.untyped_storage().nbytes() + b.untyped_storage().nbytes()
    holding = buffers.Holding().start()
    try:
        buffers.hold(a, 0)
        buffers.hold(b, 0)
        buffers.hold(a[2:], 0)  # the same storage again: counted once
        assert memory.allocated == before + nbytes
        assert buffers.live_storages() == live  # no token for a held storage
        view = wrap_buffer(a.view(8, 8), 0)  # a wrapper takes a's storage from the holding
        assert memory.allocated == before + nbytes
        assert buffers.live_storages() == live + 1
    finally:
        holding.stop()
    holding.release()
    assert memory.allocated == before + a.untyped_storage().nbytes()  # the view holds a's
    del view
    assert memory.allocated == before
    assert buffers.live_storages() == live

