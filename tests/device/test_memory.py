"""Memory accounting of neuron tensors against the simulated HBM.

Why: ``torch.neuron.memory_allocated`` is what users (and our benchmarks) read to
size batches, and out-of-memory is how a too-big program fails on the real
device. Sizes are compared with what the same CPU tensor's storage occupies, so
the tests fail if views count twice, if a freed tensor stays counted, if a failed
allocation leaks, or if the device is unusable after an OOM.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
from collections.abc import Iterator

import pytest
import torch

from tests import models
from torchneuron.hardware import current_profile, format_size, get_core, settings


def _alloc() -> int:
    gc.collect()
    return torch.neuron.memory_allocated()


def _nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


@pytest.fixture
def small_hbm() -> Iterator[int]:
    """A profile with 64 MiB of HBM per core, so an op's output can exceed it cheaply."""
    base = current_profile()
    small = dataclasses.replace(base, hbm_bytes_per_chip=64 * 2**20 * base.cores_per_chip)
    with settings.override(hardware=small):
        yield small.hbm_bytes_per_core


def test_allocation_counts_storage_bytes_and_is_freed() -> None:
    base = _alloc()
    cpu = torch.randn(37, 11)
    x = cpu.to("neuron")
    assert _alloc() - base == _nbytes(cpu)
    y = x.to(torch.bfloat16)
    assert _alloc() - base == _nbytes(cpu) + _nbytes(cpu.to(torch.bfloat16))
    del x
    assert _alloc() - base == _nbytes(cpu.to(torch.bfloat16))
    del y
    assert _alloc() == base


def test_views_do_not_count_twice() -> None:
    base = _alloc()
    x = torch.empty(64, 32, device="neuron")
    size = _alloc() - base
    assert size == 64 * 32 * 4
    views = [x[1:], x.t(), x.view(-1), x.detach(), x[:, ::2], x.unsqueeze(0), x.expand(2, 64, 32)]
    assert _alloc() - base == size
    del x
    assert _alloc() - base == size, "views keep the base storage alive"
    del views
    assert _alloc() == base


def test_compiled_outputs_are_accounted_as_eager_outputs() -> None:
    """A torch.compile'd function's new outputs count against the device as the same
    function's eager outputs do, and are freed with them; an output that is its input
    (returned as is) does not count twice."""

    def f(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (a * 2 + 1).sum(1), a * 3, a

    x = torch.randn(64, 128).to("neuron")
    base = _alloc()
    eager = f(x)
    eager_bytes = _alloc() - base
    del eager
    assert _alloc() == base
    compiled = torch.compile(f, backend="neuron")
    for _ in range(2):
        out = compiled(x)
        assert _alloc() - base == eager_bytes == (64 + 64 * 128) * 4
        del out
        assert _alloc() == base


def test_compiled_training_holds_its_saved_activations_on_the_device() -> None:
    """The activations a compiled forward saves for its backward count against the
    device until the backward frees them, as eager's do."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 8)).to("neuron")
    x = torch.randn(64, 256).to("neuron")
    hidden = 64 * 256 * 4
    compiled = torch.compile(model, backend="neuron")
    for fn in (model, compiled):
        base = _alloc()
        out = fn(x)
        held = _alloc() - base
        assert held >= hidden + _nbytes(out), "the ReLU output is saved for the backward"
        out.sum().backward()
        del out
        for p in model.parameters():
            p.grad = None
        assert _alloc() == base


def test_in_place_ops_do_not_allocate() -> None:
    x = torch.zeros(128, device="neuron")
    base = _alloc()
    x.add_(1).mul_(3)
    x[3:9].fill_(2)
    assert _alloc() == base
    assert torch.equal(x.cpu(), torch.ones(128).add_(0).mul_(3).index_fill_(0, torch.arange(3, 9), 2))


def test_peak_and_reset() -> None:
    base = _alloc()
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == base
    a = torch.empty(1000, device="neuron")
    b = torch.empty(3000, device="neuron")
    del b
    assert torch.neuron.memory_allocated() == base + 4000
    assert torch.neuron.max_memory_allocated() == base + 16000
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == base + 4000
    del a


def test_module_parameters_and_buffers_are_accounted() -> None:
    cpu = models.build("cnn")
    base = _alloc()
    dev = copy.deepcopy(cpu).to("neuron")
    expected = sum(_nbytes(t) for t in [*cpu.parameters(), *cpu.buffers()])
    assert _alloc() - base == expected
    del dev
    assert _alloc() == base


def test_deepcopy_of_a_module_counts_the_copy_on_the_same_core() -> None:
    """A copied model (an EMA or target network) is a second set of storages on the
    same device: counted while alive, freed with it; values and Parameter-ness copied,
    grads and user attributes not (``nn.Parameter.__deepcopy__``, as on the CPU), and
    the copy independent of the original."""
    cpu = models.build("mlp")
    dev = copy.deepcopy(cpu).to("neuron")
    for m in (cpu, dev):
        for p in m.parameters():
            p.grad = torch.ones_like(p)
        next(m.parameters()).tag = ["user", "attribute"]
    first = next(dev.parameters())
    before = _alloc()
    params = sum(_nbytes(p) for p in dev.parameters())
    twin = copy.deepcopy(dev)
    assert _alloc() - before == params  # its parameters (no grads, as on the CPU)
    cpu_twin_first = next(copy.deepcopy(cpu).parameters())
    twin_first = next(twin.parameters())
    assert isinstance(twin_first, torch.nn.Parameter) and twin_first.is_leaf
    assert hasattr(twin_first, "tag") == hasattr(cpu_twin_first, "tag")
    for p, q in zip(dev.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(q.cpu(), p.cpu(), rtol=0, atol=0)
        assert q.grad is None and cpu_twin_first.grad is None
    with torch.no_grad():
        twin_first.add_(1)
    assert not torch.equal(twin_first.cpu(), first.cpu())
    del twin, twin_first, q  # (q: the loop's last twin parameter)
    assert _alloc() == before


@pytest.mark.parametrize("how", ["data", "set_"])
def test_giving_a_tensor_an_empty_buffer_frees_its_old_storage(how: str) -> None:
    before = _alloc()
    t = torch.ones(100, device="neuron")
    assert _alloc() - before == _nbytes(torch.ones(100))
    empty = torch.empty(0, device="neuron")
    if how == "data":
        t.data = empty
    else:
        t.set_(empty)
    assert _alloc() == before
    assert t.shape == (0,)


def test_training_steady_state_does_not_leak() -> None:
    model = models.build("mlp").to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    seen = []
    for step in range(4):
        x, y = models.batch("mlp", seed=step)
        opt.zero_grad(set_to_none=True)
        models.loss("mlp", model(x.to("neuron")), y.to("neuron")).backward()
        opt.step()
        del x, y
        seen.append(_alloc())
    # step 0 creates momentum buffers and grads; afterwards memory is flat
    assert seen[1] == seen[2] == seen[3]
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
    assert seen[-1] >= params + grads  # params, grads and momentum are all live


def test_device_indices_are_accounted_separately() -> None:
    base0, base1 = _alloc(), torch.neuron.memory_allocated(1)
    x = torch.empty(256, device="neuron:1")
    assert torch.neuron.memory_allocated(1) - base1 == 1024
    assert _alloc() == base0
    del x


# --- out of memory -------------------------------------------------------------------------------


def test_factory_beyond_hbm_raises_oom_and_leaves_state_intact() -> None:
    capacity = get_core(0).memory.capacity
    assert capacity == current_profile().hbm_bytes_per_core
    keep = torch.arange(10.0).to("neuron")
    base = _alloc()
    peak = torch.neuron.max_memory_allocated()
    n = capacity // 4 + 1  # one float more than fits; never allocated on the host
    with pytest.raises(torch.OutOfMemoryError) as e:
        torch.empty(n, device="neuron")
    msg = str(e.value)
    assert "out of memory" in msg
    assert f"tried to allocate {format_size(n * 4)}" in msg and format_size(capacity) in msg
    assert _alloc() == base and torch.neuron.max_memory_allocated() == peak
    # the device still works and still computes what CPU computes
    assert torch.equal((keep * 2).cpu(), torch.arange(10.0) * 2)
    assert torch.equal(torch.ones(3, device="neuron").cpu(), torch.ones(3))


def test_op_output_beyond_hbm_raises_oom_and_leaves_state_intact(small_hbm: int) -> None:
    x = torch.ones(2**20, device="neuron")  # 4 MiB
    base = _alloc()
    with pytest.raises(torch.OutOfMemoryError, match="MiB") as e:
        x.repeat(17)  # 68 MiB output > 64 MiB HBM
    assert "68.00 MiB" in str(e.value) and "64.00 MiB" in str(e.value)
    assert _alloc() == base
    y = x.repeat(3)
    assert _alloc() == base + 3 * 4 * 2**20
    assert torch.equal(y[-5:].cpu(), torch.ones(5))
    del x, y


def test_memory_stats_reports_capacity() -> None:
    stats = torch.neuron.memory_stats()
    assert stats["capacity_bytes"] == current_profile().hbm_bytes_per_core
    assert stats["allocated_bytes.all.current"] == torch.neuron.memory_allocated()


def test_tensors_freed_at_interpreter_exit_print_nothing() -> None:
    """Neuron tensors that live until interpreter shutdown (held by another module, or
    by a traceback's frames) are freed after this module's globals are cleared; their
    finalizer printed "Exception ignored in: <function _Token.__del__>" with an
    AttributeError for each storage at exit."""
    import subprocess
    import sys

    code = ("import torch, torchneuron\n"
            "torch._kept_by_user = [torch.ones(4, device='neuron') * i for i in range(3)]\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
