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


def _side_stream_all_gather(nbytes: int):
    """A two-rank all-gather charged on this process's clock under a side stream, as
    FSDP2 issues it (the peer's arrival is this rank's: the charge needs no group)."""
    from torchneuron.distributed import clock
    from torchneuron.hardware import get_core
    from torchneuron.hardware.collectives import get_topology

    core = get_core(0)
    side = torch.neuron.Stream(priority=-1)
    with torch.neuron.stream(side):
        charge = clock.charge(0, "all_gather", nbytes, [0, 1], clock.arrival_ns(0),
                              get_topology(core.profile.name))
        charge.join()  # what a synchronous collective's Work.wait() does
        event = side.record_event()
    return core.timeline, side, charge, event


def test_collective_under_a_side_stream_overlaps_the_compute_issued_after_it() -> None:
    from torchneuron import hardware

    hardware.reset()
    tl, side, charge, event = _side_stream_all_gather(256 << 20)
    assert tl.device_free_ns < charge.end_ns  # the compute queue did not wait
    x = torch.randn(512, 512, device="neuron")
    for _ in range(3):
        x = x @ x  # compute while the all-gather runs
    busy = tl.device_free_ns
    assert busy > charge.start_ns
    torch.neuron.current_stream().wait_event(event)  # where FSDP2 uses the result
    assert tl.device_free_ns == max(busy, charge.end_ns)
    x = x + 1  # the next work the wait delays (exposure is settled when work is issued)
    st = tnd.stats()
    assert st["collective_ns"] == charge.cost.ns
    # only the part not hidden behind the matmuls (and the host) was waited for
    assert st["exposed_ns"] < charge.cost.ns and 0 < st["overlap"] < 1
    assert event._ns == charge.end_ns  # an event on the side stream marks the collective


def test_default_stream_waits_at_once_and_synchronize_waits_for_side_streams() -> None:
    from torchneuron import hardware
    from torchneuron.distributed import clock
    from torchneuron.hardware import get_core
    from torchneuron.hardware.collectives import get_topology

    hardware.reset()
    core = get_core(0)
    charge = clock.charge(0, "all_reduce", 1 << 20, [0, 1], clock.arrival_ns(0),
                          get_topology(core.profile.name))
    charge.join()  # under the default stream: the compute queue waits now
    assert core.timeline.device_free_ns >= charge.end_ns
    tl, side, charge, _ = _side_stream_all_gather(64 << 20)
    torch.neuron.synchronize()
    assert tl.host_ns >= charge.end_ns


def _ns(event) -> int:
    """An event's simulated time in ns, from ``elapsed_time`` against time 0."""
    zero = torch.neuron.Event(enable_timing=True)
    zero._ns, zero._index = 0, event._index
    return round(zero.elapsed_time(event) * 1e6)


def test_side_stream_work_runs_when_its_stream_is_ready_not_after_all_earlier_work() -> None:
    """A stream's order, not issue order. After three default-stream matmuls are queued,
    a side stream that depends only on work before them (FSDP2's copy-in of the next
    layer's shards) copies on the DMA queues beside them, and its compute kernel runs at
    the next kernel boundary: both end before the matmuls do. One set of engines: the
    matmuls end exactly the compute kernel's duration later; the copy costs them nothing."""
    from torchneuron import hardware
    from torchneuron.hardware import get_core

    hardware.reset()
    tl = get_core(0).timeline
    a = torch.randn(1024, 1024, device="neuron")
    shard = torch.randn(256, 1024, device="neuron")
    out = torch.empty(256, 1024, device="neuron")
    side = torch.neuron.Stream(priority=-1)
    ready = torch.neuron.current_stream().record_event()  # shard and out are ready here
    b = a @ a @ a @ a  # the current layer's compute, queued on the engines
    computed = torch.neuron.Event(enable_timing=True)
    computed.record()
    with torch.neuron.stream(side):
        side.wait_event(ready)
        out.copy_(shard)  # the next layer's copy-in: data movement only
        copied = torch.neuron.Event(enable_timing=True)
        copied.record()
        assert tl.device_free_ns == _ns(computed)
        before = tl.device_busy_ns
        scaled = shard * 2  # compute on the engines
        mul_ns = tl.device_busy_ns - before
        done = torch.neuron.Event(enable_timing=True)
        done.record()
    assert _ns(copied) < _ns(computed), "the side stream's copy waited for unrelated compute"
    assert _ns(done) < _ns(computed), "the side stream's kernel waited for unrelated compute"
    assert mul_ns > 0 and tl.device_free_ns == _ns(computed) + mul_ns
    torch.neuron.current_stream().wait_event(done)
    assert torch.equal(out.cpu(), shard.cpu()) and torch.equal(scaled.cpu(), shard.cpu() * 2)
    assert b.shape == a.shape


def test_side_stream_work_after_a_collective_waits_for_it_without_holding_the_default_stream() -> None:
    """Work a side stream issues after waiting for its collective (FSDP2's post-reduce
    division on the reduce-scatter stream) starts after the collective; the default
    stream's next work does not wait for either."""
    from torchneuron import hardware

    hardware.reset()
    tl, side, charge, _ = _side_stream_all_gather(64 << 20)
    x = torch.ones(64, 64, device="neuron")
    with torch.neuron.stream(side):
        y = x * 2
        done = torch.neuron.Event(enable_timing=True)
        done.record()
    assert _ns(done) > charge.end_ns  # ran after the collective it follows
    free = tl.device_free_ns
    z = x + 1  # default stream: not behind the side stream's collective
    assert free < tl.device_free_ns < charge.end_ns
    torch.neuron.current_stream().wait_event(done)
    w = y + z
    assert tl.device_free_ns > _ns(done)
    assert torch.equal(w.cpu(), torch.full((64, 64), 4.0))
