"""The neuron device behaves like PyTorch's accelerators around the ops (issue 6, items 5-8).

Each test states what CPU or CUDA does and checks the device does the same:
checkpoints and ``map_location`` (including a process that never imports
torchneuron), scripted and lazy modules moved to the device, pinned memory and
``DataLoader(pin_memory=True)``, generators, ``torch.accelerator`` and the
``torch.neuron`` module's cuda-like API, and messages and reprs.
"""

from __future__ import annotations

import gc
import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

NEURON = torch.device("neuron", 0)


def _checkpoint() -> tuple[bytes, dict[str, torch.Tensor]]:
    """Bytes of a checkpoint of neuron tensors (a view sharing its base), and CPU values."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    base = torch.arange(6.0).to("neuron")
    dev = {"base": base, "view": base.view(2, 3)[1], **lin.to("neuron").state_dict()}
    expected = {k: v.cpu() for k, v in dev.items()}
    buf = io.BytesIO()
    torch.save(dev, buf)
    return buf.getvalue(), expected


@pytest.mark.parametrize(
    "map_location",
    ["cpu", torch.device("cpu"), {"neuron:0": "cpu"}, lambda storage, loc: storage],
    ids=["str", "device", "dict", "callable"],
)
def test_load_with_map_location_cpu_gives_cpu_tensors(map_location: object) -> None:
    data, expected = _checkpoint()
    loaded = torch.load(io.BytesIO(data), map_location=map_location)
    for k, v in loaded.items():
        assert type(v) is torch.Tensor and v.device.type == "cpu", k
        assert torch.equal(v, expected[k]), k
    loaded["view"].add_(1)  # saved views still alias their base, as on CPU
    assert loaded["base"].tolist() == [0.0, 1.0, 2.0, 4.0, 5.0, 6.0]


@pytest.mark.parametrize("map_location", [None, "neuron", "neuron:0", torch.device("neuron")])
def test_load_to_neuron(map_location: object) -> None:
    data, expected = _checkpoint()
    loaded = torch.load(io.BytesIO(data), map_location=map_location)
    for k, v in loaded.items():
        assert v.device == NEURON and torch.equal(v.cpu(), expected[k]), k
    loaded["view"].add_(1)
    assert loaded["base"].cpu().tolist() == [0.0, 1.0, 2.0, 4.0, 5.0, 6.0]


def test_saved_parameter_loads_as_parameter() -> None:
    p = torch.nn.Parameter(torch.ones(2, device="neuron"))
    buf = io.BytesIO()
    torch.save(p, buf)
    for loc, device in ((None, NEURON), ("cpu", torch.device("cpu"))):
        buf.seek(0)
        q = torch.load(buf, map_location=loc)
        assert isinstance(q, torch.nn.Parameter) and q.requires_grad and q.device == device


def test_checkpoint_loads_in_a_process_without_torchneuron(tmp_path: Path) -> None:
    """As a CUDA checkpoint loads on a CPU-only machine with ``map_location="cpu"``."""
    data, expected = _checkpoint()
    path = tmp_path / "ckpt.pt"
    path.write_bytes(data)
    code = (
        "import sys, torch\n"
        f"d = torch.load({str(path)!r}, map_location='cpu')\n"
        "assert 'torchneuron' not in sys.modules\n"
        "print({k: v.tolist() for k, v in d.items()})\n"
        "try:\n"
        f"    torch.load({str(path)!r})\n"
        "except RuntimeError as e:\n"
        "    print('ERR', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    first, err = out.stdout.splitlines()[:2]
    assert first == str({k: v.tolist() for k, v in expected.items()})
    assert "neuron:0" in err  # no map_location: PyTorch's "don't know how to restore" error


def test_untyped_storage_on_neuron_raises_instead_of_crashing() -> None:
    with pytest.raises(RuntimeError, match="cannot be allocated on the neuron device"):
        torch.UntypedStorage(8, device="neuron")
    assert torch.UntypedStorage(8).device.type == "cpu"


def test_scripted_module_moves_to_neuron() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    scripted = torch.jit.script(lin).to("neuron")
    x = torch.randn(4, 3)
    y = scripted(x.to("neuron"))
    assert y.device == NEURON
    torch.testing.assert_close(y.cpu(), lin(x))
    y.sum().backward()
    assert scripted.weight.grad is not None and scripted.weight.grad.device == NEURON
    assert scripted.to("cpu").weight.device.type == "cpu"


def test_lazy_module_materializes_on_neuron_with_the_device_generator() -> None:
    """Like CUDA: moved while uninitialized, the weights are made and initialized on device."""
    x = torch.randn(2, 3, 6)
    torch.manual_seed(1)
    cpu = torch.nn.LazyConv1d(4, 3)
    y_cpu = cpu(x)
    torch.manual_seed(1)
    dev = torch.nn.LazyConv1d(4, 3).to("neuron")
    y_dev = dev(x.to("neuron"))
    assert isinstance(dev.weight, torch.nn.Parameter) and dev.weight.device == NEURON
    torch.testing.assert_close(y_dev.cpu(), y_cpu)
    torch.testing.assert_close(dev.weight.cpu(), cpu.weight)


# --- item 6: pinned memory and DataLoader(pin_memory=True) ------------------------------


def test_pin_memory_gives_a_pinned_copy() -> None:
    t = torch.randn(3, 4)
    p = t.pin_memory()
    assert p.is_pinned() and p[1].is_pinned() and not t.is_pinned()
    assert torch.equal(p, t) and p.data_ptr() != t.data_ptr()
    x = p.to("neuron", non_blocking=True)
    assert x.device == NEURON and torch.equal(x.cpu(), t)


@pytest.mark.parametrize("workers", [0, 1])
def test_dataloader_pin_memory(workers: int) -> None:
    data = torch.utils.data.TensorDataset(torch.arange(10.0).view(5, 2), torch.arange(5))
    loader = torch.utils.data.DataLoader(data, batch_size=2, pin_memory=True, num_workers=workers)
    threads = torch.get_num_threads()
    try:
        batches = list(loader)
    finally:
        # PyTorch's pin-memory thread calls torch.set_num_threads(1), which threads
        # created later (the device's autograd thread) inherit: keep later tests' CPU
        # kernels on the usual thread count, or bit-exact comparisons would drift.
        torch.set_num_threads(threads)
    assert all(x.is_pinned() and y.is_pinned() for x, y in batches)
    assert torch.equal(torch.cat([x for x, _ in batches]), data.tensors[0])


# --- item 7: generators, torch.accelerator, torch.neuron's cuda-like API -----------------


def test_neuron_generator_draws_what_a_cpu_generator_seeded_alike_draws() -> None:
    g = torch.Generator(device="neuron").manual_seed(5)
    c = torch.Generator().manual_seed(5)
    assert g.device == NEURON and isinstance(g, torch.Generator)
    assert isinstance(torch.default_generator, torch.Generator)
    assert torch.equal(torch.randn(4, device="neuron", generator=g).cpu(), torch.randn(4, generator=c))
    a = torch.empty(6, device="neuron").uniform_(generator=g)
    assert torch.equal(a.cpu(), torch.empty(6).uniform_(generator=c))
    assert torch.equal(g.get_state(), c.get_state())


def test_cpu_generator_for_a_neuron_op_raises_like_cuda() -> None:
    with pytest.raises(RuntimeError, match="Expected a 'neuron' device type for generator"):
        torch.randn(3, device="neuron", generator=torch.Generator())
    with pytest.raises(RuntimeError, match="Expected a 'neuron' device type for generator"):
        torch.empty(3, device="neuron").normal_(generator=torch.Generator())


def test_torch_accelerator_synchronize_and_memory() -> None:
    before = torch.accelerator.memory_allocated()
    x = torch.ones(256, device="neuron")
    torch.accelerator.synchronize()
    torch.accelerator.synchronize("neuron:0")
    assert torch.accelerator.memory_allocated() == before + x.numel() * 4
    assert torch.accelerator.memory_allocated() == torch.neuron.memory_allocated()
    assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.memory_reserved() == torch.neuron.memory_reserved()
    torch.accelerator.empty_cache()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()
    free, total = torch.accelerator.get_memory_info()
    assert total == torch.neuron.get_device_properties().total_memory and free <= total


def test_torch_neuron_mirrors_torch_cuda_api() -> None:
    n = torch.neuron
    assert n.memory_reserved() == n.memory_allocated()
    assert n.max_memory_reserved() == n.max_memory_allocated()
    n.empty_cache()
    props = n.get_device_properties(0)
    assert n.get_device_name() == props.name and "NeuronCore" in props.name
    assert props.total_memory > 0 and props.multi_processor_count > 0


def test_streams_are_one_in_order_queue() -> None:
    n = torch.neuron
    side = n.Stream()
    assert n.current_stream() == n.default_stream() != side
    with n.stream(side):
        assert n.current_stream() == side
        y = torch.ones(64, 64, device="neuron") @ torch.ones(64, 64, device="neuron")
        done = side.record_event()
    assert n.current_stream() == n.default_stream()
    n.current_stream().wait_stream(side)
    n.current_stream().wait_event(done)
    side.synchronize()
    assert side.query() and done.query()
    assert torch.equal(y.cpu(), torch.full((64, 64), 64.0))


# --- item 8: messages and reprs ------------------------------------------------------------


def test_numpy_says_to_copy_to_the_host_first_like_cuda() -> None:
    x = torch.arange(3.0).to("neuron")
    with pytest.raises(TypeError, match=r"can't convert neuron:0 device type tensor to numpy\. "
                       r"Use Tensor\.cpu\(\) to copy the tensor to host memory first"):
        x.numpy()
    assert x.numpy(force=True).tolist() == [0.0, 1.0, 2.0]


def test_repr_of_leaf_nonleaf_and_parameter_matches_cpu_with_device() -> None:
    def cpu_and_neuron(make: object) -> tuple[str, str]:
        return repr(make("cpu")), repr(make("neuron"))  # type: ignore[operator]

    def insert_device(text: str) -> str:
        head, _, tail = text.rpartition("]")
        return f"{head}], device='neuron:0'{tail}"

    cases = [
        lambda d: torch.ones(2, device=d, requires_grad=True),
        lambda d: torch.ones(2, device=d, requires_grad=True) * 2,
        lambda d: nn.Parameter(torch.ones(2, 3, device=d)),
    ]
    for make in cases:
        cpu, dev = cpu_and_neuron(make)
        assert dev == insert_device(cpu)
    assert "ToCopyBackward" not in repr(torch.ones(2, device="neuron", requires_grad=True))
    assert repr(nn.Parameter(torch.ones(1, device="neuron"))).startswith("Parameter containing:\n")


def test_first_op_does_not_import_torch_distributed_tensor() -> None:
    """The C++ DTensor probe used to import torch.distributed.tensor (and sympy) on the
    first op of every process: seconds for programs that never use DTensor."""
    code = (
        "import sys, torch, torchneuron\n"
        "x = torch.ones(2, device='neuron')\n"
        "assert (x + 1).sum().item() == 4.0\n"
        "print('torch.distributed.tensor' in sys.modules, 'sympy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_format_spec_formats_a_0_dim_tensors_value_like_cpu() -> None:
    specs = [".4f", "", ">10.2e", "g"]
    for make in (lambda d: torch.tensor(2.5, device=d).sqrt(), lambda d: torch.tensor(7, device=d)):
        cpu, dev = make("cpu"), make("neuron")
        for spec in specs:
            assert format(dev, spec) == format(cpu, spec)
        assert f"{dev:.3f}" == f"{cpu:.3f}"
    for make in (lambda d: torch.ones(2, device=d), lambda d: nn.Parameter(torch.ones((), device=d))):
        with pytest.raises(TypeError) as cpu_error:
            format(make("cpu"), ".2f")
        with pytest.raises(TypeError) as neuron_error:
            format(make("neuron"), ".2f")
        assert str(neuron_error.value) == str(cpu_error.value)
    assert format(torch.ones(2, device="neuron")) == str(torch.ones(2, device="neuron"))


def test_memory_summary_and_mem_get_info_like_cuda() -> None:
    gc.collect()  # garbage of earlier tests freed mid-test would move the free bytes
    before_free, total = torch.neuron.mem_get_info()
    x = torch.ones(1 << 18, device="neuron")  # 1 MiB
    free, total_after = torch.neuron.mem_get_info()
    assert total_after == total and free == before_free - x.numel() * 4
    assert (free, total) == torch.accelerator.get_memory_info()
    summary = torch.neuron.memory_summary()
    allocated = torch.neuron.memory_allocated()
    expected = f"{allocated / 2**20:.2f} MiB" if allocated >= 2**20 else f"{allocated} B"
    assert "Allocated memory" in summary and expected in summary
    assert torch.neuron.memory_summary(0, abbreviated=True) == summary


def test_safetensors_saves_neuron_tensors_and_sees_shared_storage(tmp_path: Path) -> None:
    """Hugging Face ``save_pretrained`` goes through safetensors, which reads storage
    pointers to find tied weights; a neuron wrapper's own storage has none."""
    st = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    model = nn.Linear(3, 2).to("neuron")
    base = torch.arange(6.0, device="neuron")
    view = base[2:]
    assert base.storage().data_ptr() == view.storage().data_ptr()
    assert base.storage().data_ptr() != model.weight.storage().data_ptr()
    st.save_file(model.state_dict(), tmp_path / "m.safetensors")
    loaded = st.load_file(tmp_path / "m.safetensors")
    for name, value in model.state_dict().items():
        assert torch.equal(loaded[name], value.cpu())


def test_data_parallel_refuses_with_what_to_do() -> None:
    """``nn.DataParallel`` needs CUDA's multi-device kernels (``torch._C._scatter``); it
    failed with ``AttributeError: module 'torch._C' has no attribute '_scatter'``."""
    model = nn.Linear(2, 2).to("neuron")
    with pytest.raises(NotImplementedError, match=r"nn\.DataParallel .* one device"):
        nn.DataParallel(model)(torch.ones(4, 2, device="neuron"))
    with pytest.raises(NotImplementedError, match=r"nn\.DataParallel"):
        nn.DataParallel(model, device_ids=[0])(torch.ones(4, 2, device="neuron"))
    assert model(torch.ones(4, 2, device="neuron")).shape == (4, 2)
