"""The neuron device as PyTorch users meet it: devices, moves, factories, printing,
parameters, state dicts, serialization, mixed-device errors and ``torch.neuron``.

Why these checks: each is a way real code reaches the device without knowing about
torchneuron. Every value is compared with what plain CPU PyTorch computes or
prints for the same tensor, so a test fails if the device changes a number, a
dtype, a shape or a stride.
"""

from __future__ import annotations

import copy
import io
import re

import pytest
import torch
from torch import nn

from tests import models
from torchneuron.device import NeuronTensor

NEURON = torch.device("neuron", 0)
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool]


def _cpu_sample(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, generator=g) * 4
    return x.to(dtype)


# --- the device itself -------------------------------------------------------------------


def test_torch_device_parses_neuron() -> None:
    assert torch.device("neuron").type == "neuron"
    assert torch.device("neuron:1") == torch.device("neuron", 1)
    assert str(torch.device("neuron", 3)) == "neuron:3"


def test_accelerator_reports_neuron() -> None:
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.device_count() == torch.neuron.device_count()


# --- moving tensors ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_to_and_back_is_exact(dtype: torch.dtype) -> None:
    x = _cpu_sample(dtype)
    for moved in (x.to("neuron"), x.neuron(), x.to(NEURON), x.to(device="neuron:0")):
        assert isinstance(moved, NeuronTensor)
        assert moved.device == NEURON
        assert moved.dtype == dtype and moved.shape == x.shape and moved.stride() == x.stride()
        back = moved.cpu()
        assert type(back) is torch.Tensor and back.device.type == "cpu"
        assert torch.equal(back, x)


def test_non_contiguous_source_keeps_cpu_semantics() -> None:
    x = torch.arange(24.0).view(4, 6)[:, 1::2].t()
    n = x.to("neuron")
    ref = x.clone()  # what .to() on CPU would give for a copy
    assert n.shape == ref.shape and n.stride() == ref.stride()
    assert torch.equal(n.cpu(), x)


def test_views_report_cpu_metadata_and_alias() -> None:
    x = torch.arange(24.0).view(2, 3, 4)
    n = x.to("neuron")
    for f in (
        lambda t: t.transpose(0, 2), lambda t: t[:, 1:, ::2], lambda t: t.view(6, 4),
        lambda t: t.permute(2, 0, 1), lambda t: t.unsqueeze(1), lambda t: t.select(1, 2),
    ):
        c, d = f(x), f(n)
        assert (d.shape, d.stride(), d.storage_offset()) == (c.shape, c.stride(), c.storage_offset())
        assert torch.equal(d.cpu(), c)
    # in-place through a view writes the base, as on CPU
    x2, n2 = x.clone(), n.clone()
    x2[:, 1].mul_(-1)
    n2[:, 1].mul_(-1)
    assert torch.equal(n2.cpu(), x2)


def test_module_to_moves_parameters_and_buffers() -> None:
    cpu = models.build("cnn", seed=1)
    dev = copy.deepcopy(cpu).to("neuron")
    for (name, p), (_, q) in zip(cpu.named_parameters(), dev.named_parameters(), strict=True):
        assert isinstance(q, nn.Parameter) and isinstance(q, NeuronTensor), name
        assert q.device == NEURON and q.requires_grad
        assert torch.equal(q.cpu(), p), name
    for (name, b), (_, c) in zip(cpu.named_buffers(), dev.named_buffers(), strict=True):
        assert c.device == NEURON and c.dtype == b.dtype, name
        assert torch.equal(c.cpu(), b), name


def test_module_neuron_keeps_tied_weights_tied() -> None:
    lm = models.build("tiny_lm").neuron()
    assert lm.head.weight is lm.tok.weight
    assert len(list(lm.parameters())) == len(list(models.build("tiny_lm").parameters()))


# --- factories ------------------------------------------------------------------------------



@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: torch.zeros(2, 3, **kw),
        lambda **kw: torch.ones(4, dtype=torch.bfloat16, **kw),
        lambda **kw: torch.full((2, 2), 7, **kw),
        lambda **kw: torch.arange(0, 10, 3, **kw),
        lambda **kw: torch.linspace(0, 1, 5, **kw),
        lambda **kw: torch.eye(3, **kw),
        lambda **kw: torch.tensor([[1.5, -2.0], [3.0, 4.25]], **kw),
        lambda **kw: torch.as_tensor([1, 2, 3], **kw),
        lambda **kw: torch.tensor(3.5, **kw),
    ],
    ids=["zeros", "ones_bf16", "full", "arange", "linspace", "eye", "tensor", "as_tensor", "scalar"],
)
def test_factories_match_cpu(make) -> None:  # noqa: ANN001
    c = make()
    n = make(device="neuron")
    assert n.device == NEURON and n.dtype == c.dtype and n.shape == c.shape
    assert torch.equal(n.cpu(), c)


def test_empty_and_like_factories_stay_on_device() -> None:
    n = torch.empty(2, 5, device="neuron")
    assert n.device == NEURON and n.shape == (2, 5) and n.stride() == (5, 1)
    for f in (torch.zeros_like, torch.ones_like, torch.empty_like, torch.randn_like):
        assert f(n).device == NEURON
    assert torch.equal(torch.ones_like(n).cpu(), torch.ones(2, 5))
    assert torch.equal(n.new_tensor([5.0, 6.0]).cpu(), torch.tensor([5.0, 6.0]))


def test_random_factories_draw_what_cpu_draws_under_the_same_seed() -> None:
    torch.manual_seed(123)
    c = (torch.randn(4, 5), torch.rand(3), torch.randint(0, 10, (6,)))
    torch.manual_seed(123)
    n = (
        torch.randn(4, 5, device="neuron"),
        torch.rand(3, device="neuron"),
        torch.randint(0, 10, (6,), device="neuron"),
    )
    for a, b in zip(c, n, strict=True):
        assert torch.equal(b.cpu(), a)


# --- reading values ---------------------------------------------------------------------------


def _with_device(cpu_repr: str, device: str = "neuron:0") -> str:
    """CPU repr with the device suffix where PyTorch puts it for cuda: first suffix,
    before ``dtype=`` and ``requires_grad=`` (``tensor([1.], device='cuda:0',
    dtype=torch.bfloat16)``)."""
    cut = min(
        (i for i in (cpu_repr.find(", dtype="), cpu_repr.find(", requires_grad=")) if i >= 0),
        default=len(cpu_repr) - 1,
    )
    return cpu_repr[:cut] + f", device='{device}'" + cpu_repr[cut:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_print_matches_cpu_with_device_suffix(dtype: torch.dtype) -> None:
    x = _cpu_sample(dtype)
    assert repr(x.to("neuron")) == _with_device(repr(x))
    assert str(x.to("neuron")) == _with_device(str(x))


def _unwrapped_suffixes(text: str) -> str:
    """PyTorch moves a suffix to its own line when the last line would pass the line
    width (``_add_suffixes``); with the device suffix added that happens sooner, as
    it does for cuda. Compare the suffixes, not where the line breaks."""
    return re.sub(r",\n\s+(device|dtype|requires_grad|grad_fn)=", r", \1=", text)


def test_print_puts_device_before_dtype_like_cuda() -> None:
    x = _cpu_sample(torch.bfloat16)
    assert _unwrapped_suffixes(repr(x.to("neuron"))) == _with_device(repr(x))


def test_print_of_tensor_requiring_grad_says_requires_grad() -> None:
    """As with cuda: ``tensor([...], device='cuda:0', requires_grad=True)``."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    assert repr(x.detach().to("neuron").requires_grad_()) == _with_device(repr(x))


def test_item_and_tolist_match_cpu() -> None:
    x = _cpu_sample(torch.float32)
    n = x.to("neuron")
    assert n.tolist() == x.tolist()
    assert n[1, 2].item() == x[1, 2].item()
    assert n.sum().item() == x.sum().item()


# --- parameters, state dicts, serialization ---------------------------------------------------


def test_parameter_on_device_gets_gradients() -> None:
    w_cpu = nn.Parameter(torch.linspace(-1, 1, 6).view(2, 3))
    w = nn.Parameter(w_cpu.detach().to("neuron"))
    assert isinstance(w, nn.Parameter) and w.requires_grad and w.device == NEURON
    x = torch.arange(3.0)
    (w_cpu @ x).pow(2).sum().backward()
    (w @ x.to("neuron")).pow(2).sum().backward()
    assert w.grad is not None and w.grad.device == NEURON
    assert torch.equal(w.grad.cpu(), w_cpu.grad)


def test_state_dict_round_trips_between_devices() -> None:
    cpu = models.build("cnn", seed=2)
    dev = models.build("cnn", seed=3).to("neuron")
    dev.load_state_dict(cpu.state_dict())  # CPU values copied into device tensors
    for k, v in dev.state_dict().items():
        assert v.device == NEURON, k
        assert torch.equal(v.cpu(), cpu.state_dict()[k]), k
    back = models.build("cnn", seed=4)
    back.load_state_dict(dev.state_dict())  # device values copied into CPU tensors
    for k, v in back.state_dict().items():
        assert v.device.type == "cpu" and torch.equal(v, cpu.state_dict()[k]), k


def test_torch_save_load_round_trip() -> None:
    cpu = models.build("tiny_lm", seed=5)
    dev = copy.deepcopy(cpu).to("neuron")
    buf = io.BytesIO()
    torch.save({"model": dev.state_dict(), "x": torch.arange(4).to("neuron")}, buf)
    buf.seek(0)
    loaded = torch.load(buf)  # weights_only: the neuron rebuild is a safe global
    assert loaded["x"].device == NEURON and torch.equal(loaded["x"].cpu(), torch.arange(4))
    fresh = models.build("tiny_lm", seed=6).to("neuron")
    fresh.load_state_dict(loaded["model"])
    for k, v in fresh.state_dict().items():
        assert v.device == NEURON and torch.equal(v.cpu(), cpu.state_dict()[k]), k


# --- mixed devices ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op",
    [lambda a, b: a + b, lambda a, b: b * a, torch.mm, lambda a, b: torch.cat([a, b])],
    ids=["add", "rmul", "mm", "cat"],
)
def test_mixing_neuron_and_cpu_fails_like_cuda(op) -> None:  # noqa: ANN001
    a = torch.ones(2, 2, device="neuron")
    b = torch.ones(2, 2)
    for x, y in ((a, b), (b, a)):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device") as e:
            op(x, y)
        assert "neuron:0" in str(e.value) and "cpu" in str(e.value)


def test_cpu_scalar_tensor_is_allowed_like_cuda() -> None:
    x = torch.tensor([1.0, -2.0, 3.0])
    s = torch.tensor(2.5)
    assert torch.equal((x.to("neuron") * s).cpu(), x * s)
    assert torch.equal(torch.where(x.to("neuron") > 0, s, -s).cpu(), torch.where(x > 0, s, -s))


def test_two_neuron_devices_do_not_mix() -> None:
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(2, device="neuron:0") + torch.ones(2, device="neuron:1")


# --- torch.neuron ------------------------------------------------------------------------------------


def test_module_api_basics() -> None:
    from torchneuron.hardware import current_profile

    assert torch.neuron.is_available()
    assert torch.neuron.device_count() == current_profile().cores_per_chip
    assert torch.neuron.current_device() == 0


def test_set_device_selects_default_index() -> None:
    try:
        torch.neuron.set_device(1)
        assert torch.neuron.current_device() == 1
        assert torch.zeros(2, device="neuron").device == torch.device("neuron", 1)
        assert torch.ones(2).neuron().device == torch.device("neuron", 1)
        with torch.neuron.device(2):
            assert torch.empty(1, device="neuron").device == torch.device("neuron", 2)
        assert torch.neuron.current_device() == 1
    finally:
        torch.neuron.set_device(0)
    with pytest.raises((RuntimeError, ValueError), match="99"):
        torch.neuron.set_device(99)


def test_ops_stay_on_their_device_index() -> None:
    x = torch.arange(4.0).to("neuron:3")
    y = (x * 2).sum()
    assert y.device == torch.device("neuron", 3)
    assert y.item() == (torch.arange(4.0) * 2).sum().item()


def test_manual_seed_and_rng_state() -> None:
    torch.neuron.manual_seed(7)
    a = torch.rand(5, device="neuron")
    state = torch.neuron.get_rng_state()
    b = torch.rand(5, device="neuron")
    torch.neuron.set_rng_state(state)
    b2 = torch.rand(5, device="neuron")
    assert torch.equal(b.cpu(), b2.cpu())
    g = torch.Generator().manual_seed(7)
    assert torch.equal(a.cpu(), torch.rand(5, generator=g))
    assert torch.equal(b.cpu(), torch.rand(5, generator=g))


def test_device_generator_is_separate_from_cpu_generator() -> None:
    """Drawing on the device does not advance the CPU stream (and vice versa), as with cuda."""
    torch.manual_seed(11)
    ref = torch.rand(3)
    torch.manual_seed(11)
    torch.rand(100, device="neuron")
    assert torch.equal(torch.rand(3), ref)
