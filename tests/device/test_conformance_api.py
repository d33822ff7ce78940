"""The neuron device behaves like PyTorch's accelerators around the ops (issue 6, items 5-8).

Each test states what CPU or CUDA does and checks the device does the same:
checkpoints and ``map_location`` (including a process that never imports
torchneuron), scripted and lazy modules moved to the device, pinned memory and
``DataLoader(pin_memory=True)``, generators, ``torch.accelerator`` and the
``torch.neuron`` module's cuda-like API, and messages and reprs.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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
