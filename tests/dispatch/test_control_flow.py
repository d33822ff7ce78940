"""``torch.cond`` on neuron tensors gives CPU's values, gradients and errors, in eager and
under ``torch.compile`` (where the graph runs eagerly on the device, counted).

Why: eager ``torch.cond`` traces itself with Dynamo, whose fake-mode rule for ``cond``
accepted only plain fake tensors, so every call on the device failed
(``dispatch/control_flow.py``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchneuron


def _pick(x: torch.Tensor) -> torch.Tensor:
    return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


class _Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cond(x.mean() > 0,
                          lambda x: (self.lin(x), x * self.w),
                          lambda x: (self.lin(x).relu(), x - self.w), (x,))


def _compiled(fn, dev: str):  # noqa: ANN001, ANN202
    return torch.compile(fn, backend="neuron" if dev == "neuron" else "aot_eager")


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["true", "false"])
def test_cond_values_and_grads_as_cpu(compile: bool, sign: float) -> None:
    x0 = torch.randn(5, generator=torch.Generator().manual_seed(0)).abs() * sign
    res = {}
    for dev in ("cpu", "neuron"):
        x = x0.to(dev).detach().requires_grad_()
        fn = _compiled(_pick, dev) if compile else _pick
        y = fn(x)
        (y * torch.arange(5.0, device=dev)).sum().backward()
        res[dev] = (y, x.grad)
    for c, n in zip(res["cpu"], res["neuron"], strict=True):
        assert n.device.type == "neuron"
        torch.testing.assert_close(n.cpu(), c, rtol=0, atol=0)


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_cond_in_a_module_with_captured_parameters(compile: bool) -> None:
    torch.manual_seed(0)
    ref = _Branchy()
    x0 = torch.randn(3, 4)
    res = {}
    for dev in ("cpu", "neuron"):
        m = _Branchy()
        m.load_state_dict(ref.state_dict())
        m.to(dev)
        fn = _compiled(m, dev) if compile else m
        for sign in (1.0, -1.0):
            a, b = fn(x0.to(dev) * sign)
            (a.sum() + (b * b).sum()).backward()
        res[dev] = [a, b] + [p.grad for p in m.parameters()]
    for c, n in zip(res["cpu"], res["neuron"], strict=True):
        torch.testing.assert_close(n.cpu(), c)


def _bad_dtype(x: torch.Tensor) -> torch.Tensor:
    return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.int(), (x,))


def _mutates(x: torch.Tensor) -> torch.Tensor:
    def true_fn(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x.clone()

    return torch.cond(x.sum() > 0, true_fn, lambda x: x.clone(), (x,))


@pytest.mark.parametrize("fn", [_bad_dtype, _mutates], ids=["dtypes-differ", "mutates-input"])
def test_cond_errors_as_cpu(fn) -> None:  # noqa: ANN001
    x = torch.ones(3)
    with pytest.raises(Exception) as cpu_err:
        fn(x)
    with pytest.raises(type(cpu_err.value)) as neuron_err:
        fn(x.to("neuron"))
    assert str(neuron_err.value).split("\n")[0] == str(cpu_err.value).split("\n")[0]


def test_compiled_cond_is_counted_as_run_eagerly() -> None:
    torchneuron.compiler.reset_stats()
    x = torch.randn(4)
    out = torch.compile(_pick, backend="neuron")(x.to("neuron"))
    assert torch.equal(out.cpu(), _pick(x))
    assert torchneuron.compiler.stats()["failures_by_stage"] == {"prepare:control-flow": 1}


def _doubling(x: torch.Tensor, limit: torch.Tensor) -> tuple:
    from torch._higher_order_ops.while_loop import while_loop

    return while_loop(lambda i, x: (i < 3) & (x.sum() < limit),
                      lambda i, x: (i + 1, x * 2 + 1), (torch.zeros((), dtype=torch.int64,
                                                                    device=x.device), x))


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_while_loop_as_cpu(compile: bool) -> None:
    """Dynamo's aliasing check of while_loop's inputs refused tensor subclasses, and
    PyTorch had no while_loop rule for them ("get_tensor_storages does not support
    traceable wrapper subclasses")."""
    x0 = torch.randn(4, generator=torch.Generator().manual_seed(0))
    for limit in (100.0, -100.0):
        res = {}
        for dev in ("cpu", "neuron"):
            fn = _compiled(_doubling, dev) if compile else _doubling
            res[dev] = fn(x0.to(dev), torch.tensor(limit).to(dev))
        for c, n in zip(res["cpu"], res["neuron"], strict=True):
            assert n.device.type == "neuron"
            torch.testing.assert_close(n.cpu(), c, rtol=0, atol=0)
