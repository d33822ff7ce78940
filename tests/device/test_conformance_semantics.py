"""Places where the device used to give a silently wrong result instead of CPU's result
or CUDA's error: ``param.data = other``, a custom Function's gradient on the wrong
device, and a CPU tensor indexed with device indices.

Each check does the same thing on CPU (or, for device mismatches that CPU alone
cannot produce, with CPU and the ``meta`` device, whose errors PyTorch words the same
way as CUDA's) and compares.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

NEURON = torch.device("neuron", 0)


# --- .data assignment ----------------------------------------------------------------------


@pytest.mark.parametrize("new_shape", [(2, 3), (4,)])
def test_setting_data_gives_the_new_values_and_shape(new_shape: tuple[int, ...]) -> None:
    results = []
    for dev in ("cpu", NEURON):
        p = nn.Parameter(torch.zeros(2, 3, device=dev))
        p.data = torch.arange(float(torch.Size(new_shape).numel()), device=dev).reshape(new_shape)
        results.append((p.detach().cpu(), p.data.cpu(), p.requires_grad, p.device))
    (c, cd, crg, _), (n, nd, nrg, ndev) = results
    torch.testing.assert_close(n, c)
    torch.testing.assert_close(nd, cd)
    assert nrg == crg and ndev == NEURON


def test_vector_to_parameters_writes_the_parameters() -> None:
    torch.manual_seed(0)
    cpu = nn.Linear(3, 2)
    dev = nn.Linear(3, 2).to(NEURON)
    vec = torch.arange(8.0)
    nn.utils.vector_to_parameters(vec, cpu.parameters())
    nn.utils.vector_to_parameters(vec.to(NEURON), dev.parameters())
    for p, q in zip(cpu.parameters(), dev.parameters(), strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach())
    x = torch.randn(4, 3)
    torch.testing.assert_close(dev(x.to(NEURON)).detach().cpu(), cpu(x).detach())
    torch.testing.assert_close(nn.utils.parameters_to_vector(dev.parameters()).cpu(), vec)


def test_weight_tying_through_data_shares_the_values() -> None:
    results = []
    for dev in ("cpu", NEURON):
        torch.manual_seed(0)
        enc, dec = nn.Embedding(5, 3).to(dev), nn.Linear(3, 5, bias=False).to(dev)
        dec.weight.data = enc.weight.data
        with torch.no_grad():
            enc.weight.mul_(2)  # visible through the tied weight
        out = dec(torch.ones(1, 3, device=dev))
        out.sum().backward()
        results.append((dec.weight.detach().cpu(), out.detach().cpu(), dec.weight.grad.cpu()))
    for c, n in zip(*results, strict=True):
        torch.testing.assert_close(n, c)


def test_setting_data_to_a_cpu_tensor_is_refused() -> None:
    p = nn.Parameter(torch.zeros(2, device=NEURON))
    with pytest.raises(RuntimeError, match=r"\.data must be a neuron tensor"):
        p.data = torch.ones(2)
    torch.testing.assert_close(p.detach().cpu(), torch.zeros(2))


# --- custom Function gradients -------------------------------------------------------------


def _bad_function(grad_device: str | torch.device) -> type:
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, flag, k, x):  # noqa: ANN001, ANN205
            return x * 2

        @staticmethod
        def backward(ctx, g):  # noqa: ANN001, ANN205
            return None, None, torch.ones_like(g, device=grad_device)

    return Scale


def test_custom_function_gradient_on_the_wrong_device_raises_like_pytorch() -> None:
    # CPU input, meta gradient: PyTorch's own message for a device mismatch
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError) as cpu_err:
        _bad_function("meta").apply(torch.ones(1), 3, x).sum().backward()
    xn = torch.randn(3, device=NEURON, requires_grad=True)
    with pytest.raises(RuntimeError) as dev_err:
        _bad_function("cpu").apply(torch.ones(1, device=NEURON), 3, xn).sum().backward()
    expected = str(cpu_err.value).replace("device cpu but got meta", "device neuron:0 but got cpu")
    assert str(dev_err.value) == expected
    assert xn.grad is None


def test_custom_function_zero_dim_gradient_is_moved_like_pytorch() -> None:
    class Sum(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # noqa: ANN001, ANN205
            return x.sum()

        @staticmethod
        def backward(ctx, g):  # noqa: ANN001, ANN205
            return g.detach().cpu().sum() * 3  # 0-dim, on the CPU

    x = torch.tensor(2.0, device=NEURON, requires_grad=True)
    Sum.apply(x).backward()
    assert x.grad.device == NEURON
    assert x.grad.item() == 3.0


# --- indexing ------------------------------------------------------------------------------


def test_cpu_tensor_indexed_with_device_indices_raises_like_cuda() -> None:
    a = torch.arange(5.0)
    idx = torch.tensor([1, 2], device=NEURON)
    # CUDA's check (check_indices_on_cpu_or_selfdevice in ATen) raises IndexError with
    # this message; no CPU-only device pair reproduces it (meta indices are accepted)
    with pytest.raises(IndexError) as err:
        a[idx]
    assert str(err.value) == (
        "indices should be either on cpu or on the same device as the indexed tensor (cpu)"
    )
    with pytest.raises(IndexError, match="indices should be either on cpu"):
        a[idx] = 1.0
    with pytest.raises(IndexError, match="indices should be either on cpu"):
        a[a.to(NEURON) > 1]  # a bool mask on the device
    with pytest.raises(RuntimeError, match="same device"):
        a[torch.tensor([1, 2])] = torch.ones(2, device=NEURON)
    torch.testing.assert_close(a, torch.arange(5.0))


def test_device_tensor_indexed_with_cpu_indices_still_works() -> None:
    a = torch.arange(5.0)
    n = a.to(NEURON)
    i = torch.tensor([3, 1])
    torch.testing.assert_close(n[i].cpu(), a[i])
    torch.testing.assert_close(n[a > 1].cpu(), a[a > 1])
    n[i] = torch.tensor([7.0, 8.0], device=NEURON)
    a[i] = torch.tensor([7.0, 8.0])
    torch.testing.assert_close(n.cpu(), a)


# --- deepcopy ----------------------------------------------------------------------------


def test_deepcopy_of_parameters_and_models_as_on_the_cpu() -> None:
    """``nn.Parameter.__deepcopy__`` copies values and ``requires_grad`` only; a neuron
    parameter (a subclass tensor with ``_is_param``) also copied ``.grad`` and user
    attributes, so a deep-copied model (EMA weights) kept the live model's gradients."""
    def run(dev: torch.device | str) -> list:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).to(dev)
        model(torch.randn(5, 4).to(dev)).sum().backward()
        frozen = nn.Parameter(torch.ones(2, device=dev), requires_grad=False)
        frozen.tag = "x"
        plain = torch.ones(2, device=dev, requires_grad=True)
        plain.grad = torch.full((2,), 3.0, device=dev)
        copies = copy.deepcopy([model, frozen, plain])
        m2, f2, p2 = copies
        return ([(isinstance(p, nn.Parameter), p.requires_grad, p.grad is None, p.detach().cpu())
                 for p in m2.parameters()]
                + [(isinstance(f2, nn.Parameter), f2.requires_grad, hasattr(f2, "tag")),
                   (p2.requires_grad, p2.grad.cpu()), m2[1].running_mean.cpu()])

    def same(a: object, b: object) -> bool:
        if isinstance(a, torch.Tensor):
            return torch.allclose(a, b)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        return a == b

    assert same(run(NEURON), run("cpu"))
