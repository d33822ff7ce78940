"""The core: eager kernels, executables, compile latency, hardware swap, singletons."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from torchneuron.hardware import (
    KernelWork,
    NeuronCore,
    aten_kernel_work,
    current_profile,
    device_count,
    get_core,
    get_profile,
    set_hardware,
    settings,
)

aten = torch.ops.aten
WORK = KernelWork(vector_elems=1024, hbm_read_bytes=4096, hbm_write_bytes=4096)


def test_compile_latency_charged_once_per_signature() -> None:
    core = NeuronCore(0)
    p = core.profile
    with settings.override(compile_latency=True):
        core.run_eager_kernel("add", (("f32", (4,)),), WORK)
        core.run_eager_kernel("add", (("f32", (4,)),), WORK)
        core.run_eager_kernel("add", (("f32", (8,)),), WORK)
    by = core.timeline.host_by_category
    assert by["compile"] == 2 * p.eager_compile_ns
    assert by["dispatch"] == 3 * p.host_dispatch_ns
    assert by["launch"] == 3 * p.kernel_launch_ns
    assert core.stats()["eager_compiles"] == 2


def test_compile_latency_zeroed_by_setting() -> None:
    core = NeuronCore(0)
    with settings.override(compile_latency=False):
        core.run_eager_kernel("add", ("sig",), WORK)
    assert "compile" not in core.timeline.host_by_category
    assert core.eager_compiles == 1  # still counted, just not charged


def test_metadata_op_costs_dispatch_only() -> None:
    core = NeuronCore(0)
    assert core.run_eager_kernel("view", ("sig",), None) is None
    assert core.timeline.host_by_category == {"dispatch": core.profile.host_dispatch_ns}
    assert core.timeline.enqueued == 0 and core.stats()["ops"] == {"view": 1}


def test_eager_kernel_runs_after_launch_asynchronously() -> None:
    core = NeuronCore(0)
    with settings.override(compile_latency=False):
        cost = core.run_eager_kernel("add", ("sig",), WORK)
    assert cost is not None
    p = core.profile
    host = p.host_dispatch_ns + p.kernel_launch_ns
    assert core.now == host
    assert core.record_event() == host + cost.total_ns
    assert core.synchronize() == host + cost.total_ns


def test_run_executable() -> None:
    core = NeuronCore(0)
    start, end = core.run_executable(1_000_000, "step", n_kernels=12)
    assert start == core.profile.executable_launch_ns and end == start + 1_000_000
    s = core.stats()
    assert s["executables"] == {"step": 1} and s["executable_kernels"] == 12


def test_small_mlp_stream_is_host_bound() -> None:
    """30 tiny real aten ops: dispatch + launch dwarf the device time."""
    core = get_core(0)
    x = torch.randn(64, 512)
    w = torch.randn(512, 512)
    b = torch.randn(512)
    ops = []
    for _ in range(10):
        ops += [(aten.addmm.default, (b, x, w)), (aten.relu.default, (x,)),
                (aten.add.Tensor, (x, x))]  # fmt: skip
    with settings.override(compile_latency=False):
        for func, args in ops:
            out = func(*args)
            work = aten_kernel_work(func, args, {}, out)
            core.run_eager_kernel(str(func), tuple(tuple(a.shape) for a in args), work)
        core.synchronize()
    s = core.stats()
    host_overhead = s["host_ns_by_category"]["dispatch"] + s["host_ns_by_category"]["launch"]
    assert s["kernel_launches"] == 30
    assert host_overhead > 3 * s["device_busy_ns"]
    assert s["device_idle_ns"] > s["device_busy_ns"]  # the device waits on the host
    assert host_overhead / s["host_ns"] > 0.9


def test_set_hardware_swaps_profile_keeps_counters() -> None:
    core = get_core(0)
    core.run_eager_kernel("add", ("sig",), WORK)
    before = core.now
    set_hardware("trn3")
    assert current_profile().name == "trn3" and core.profile.name == "trn3"
    assert core.memory.capacity == get_profile("trn3").hbm_bytes_per_core
    assert core.now == before and core.ops["add"] == 1
    assert not core.seen_signatures  # NEFFs target one chip: recompiled after a swap
    custom = dataclasses.replace(get_profile("trn2"), name="tiny", hbm_bytes_per_chip=8 * 1024)
    set_hardware(custom)
    assert core.memory.capacity == 1024
    with pytest.raises(torch.OutOfMemoryError):
        core.memory.allocate(2048)
    with pytest.raises(ValueError, match="trn2"):
        set_hardware("nope")


def test_get_core_singletons_and_bounds() -> None:
    assert get_core(1) is get_core(1) and get_core(1) is not get_core(0)
    assert device_count() == 8
    with pytest.raises(ValueError, match="0..7"):
        get_core(8)


def test_dma_only_work_is_launched_but_never_compiled() -> None:
    core = NeuronCore(0)
    with settings.override(compile_latency=True):
        cost = core.run_eager_kernel("copy_", ("sig",), KernelWork(hbm_read_bytes=4096))
    assert cost is not None and cost.bound in ("dma", "fixed")
    assert "compile" not in core.timeline.host_by_category and core.eager_compiles == 0
    assert core.kernels == 1
