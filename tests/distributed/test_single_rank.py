"""The "neuron" backend in this process (a group of one rank): registration, PyTorch's own
errors, the collective track in the Chrome trace, ``stats``."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist

import torchneuron.distributed as tnd
from torchneuron import profiler


@pytest.fixture
def group():
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_registered_for_the_neuron_device() -> None:
    assert "neuron" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["neuron"] == "neuron"


def test_collective_before_init_is_pytorchs_error() -> None:
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        dist.all_reduce(torch.ones(2, device="neuron"))


def test_second_init_is_pytorchs_error(group) -> None:
    with pytest.raises(ValueError, match="twice"):
        dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1)


def test_one_rank_collectives_trace_and_stats(group) -> None:
    assert type(group).__name__ == "NeuronProcessGroup" and group.name() == "neuron"
    x = torch.arange(6.0, device="neuron")
    before = tnd.stats()["collectives"]
    with profiler.profile() as prof:
        dist.all_reduce(x)
        out = torch.empty(6, device="neuron")
        dist.all_gather_into_tensor(out, x)
        w = dist.broadcast(x, src=0, async_op=True)
        w.wait()
    assert torch.equal(out.cpu(), torch.arange(6.0))
    assert tnd.stats()["collectives"] == before + 3
    trace = json.loads(json.dumps(prof.to_chrome_trace()))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {e.get("args", {}).get("name") for e in events if e.get("ph") == "M"}
    assert "collective" in names


def test_device_module_has_what_fsdp2_needs() -> None:
    mod = torch.get_device_module("neuron")
    s = mod.Stream(priority=-1)
    with mod.stream(s):
        assert mod.current_stream() == s
    e = mod.Event()
    s.wait_event(e)
    s.wait_stream(mod.current_stream())
    assert isinstance(mod.current_device(), int)
