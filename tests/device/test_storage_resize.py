"""FSDP2's storage free / re-allocation on a neuron tensor (``buffers.resize_storage``)."""

from __future__ import annotations

import torch

from torchneuron.device import buffers
from torchneuron.device.module import memory_allocated


def test_resize_storage_frees_and_regrows_with_views_and_accounting() -> None:
    t = torch.arange(1024, dtype=torch.float32, device="neuron")
    view = t[10:20]
    before = memory_allocated()
    buffers.resize_storage(t, 0)
    assert memory_allocated() == before - 4096
    assert t.buffer.untyped_storage().nbytes() == 0
    buffers.resize_storage(view, 4096)  # any wrapper over the storage brings it back
    assert memory_allocated() == before
    t.copy_(torch.arange(1024, dtype=torch.float32))
    assert torch.equal(view.cpu(), torch.arange(10, 20, dtype=torch.float32))
    del t, view
    assert memory_allocated() == before - 4096


def test_untyped_storage_resize_of_the_wrapper_still_refused() -> None:
    # the wrapper's own storage stays PyTorch's (Dynamo reads it); FSDP2 gets its helpers
    t = torch.ones(4, device="neuron")
    try:
        t.untyped_storage().resize_(0)
    except RuntimeError as e:
        assert "invalid python storage" in str(e)
    else:
        raise AssertionError("expected PyTorch's refusal")
