"""What the replay and special-value sweeps found once they judged every output bit for bit
(sweep 8, on an AVX-512 machine): each compiled = eager CPU bit for bit.

- ``elu`` / ``celu`` / ``selu`` and the backward: ``expm1`` / ``exp`` are SLEEF's in the
  vector body of ATen's loop and libm's in its tail (eager's kernel now: 3 of 60 off);
- ``pow`` with an exponent eager has no shortcut for (``F.lp_pool1d``'s ``** (2/3)``);
- ``cdist``, ``pdist``, ``prod`` over several dims, ``index_reduce``, binary cross entropy and
  soft margin loss with their gradients: eager's kernel in the program;
- ``native_batch_norm_backward`` handed an expanded output gradient (``out.sum()``'s
  ones): eager's kernel takes another path for a broadcast operand, so the program hands
  it the operand in its strides again (stablehlo/operand_layout.py);
- a convolution's weight gradient whose output gradient is a constant (a region from
  ``out.sum()`` to the backward): the collapse to eager's ``convolution_backward``
  (interpreter/collapse/conv_weight.py) now takes a constant operand.

A ``test_exact_`` file: ``test_bits_per_cpu_capability.py`` runs it again at every CPU
capability the machine has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.exact import bits_equal, matches_eager, torch_compile_matches_eager

aten = torch.ops.aten


def _u(lo: float, hi: float, *shape: int) -> torch.Tensor:
    """Values in [lo, hi); 67 elements fill two 16-wide vector blocks and a scalar tail."""
    return torch.rand(*shape, generator=torch.Generator().manual_seed(7)) * (hi - lo) + lo


@pytest.mark.parametrize("name,fn", [
    ("elu", F.elu), ("celu", lambda x: F.celu(x, 0.5)), ("selu", F.selu),
    ("elu-alpha", lambda x: F.elu(x, 1.7)),
])  # fmt: skip
def test_elu_family_and_gradients_are_eagers(name: str, fn: Callable[..., Any]) -> None:
    torch_compile_matches_eager(fn, _u(-6, 2, 67), grad=True)
    torch_compile_matches_eager(fn, _u(-6, 2, 3, 4, 5), grad=True)


@pytest.mark.parametrize("exponent", [2 / 3, -1 / 3, 1.5, 2.5, 0.3])
@pytest.mark.parametrize("n", [9, 67])
def test_pow_without_a_shortcut_is_eagers(exponent: float, n: int) -> None:
    matches_eager(lambda x: torch.pow(x, exponent), _u(0, 5, n))


def test_cdist_is_eagers() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(1, 2, 3), torch.randn(1, 2, 3)
    matches_eager(lambda x, y: torch.cdist(x, y), a, b)
    matches_eager(lambda x, y: torch.cdist(x, y, p=1.5), torch.randn(4, 5), torch.randn(3, 5))
    # more than 25 rows: eager takes the matrix-product form (``_euclidean_dist``)
    matches_eager(lambda x, y: torch.cdist(x, y), torch.randn(30, 5), torch.randn(28, 5))


@pytest.mark.parametrize("p", [2.0, 1.5])
def test_pdist_and_gradient_are_eagers(p: float) -> None:
    torch.manual_seed(0)
    torch_compile_matches_eager(lambda x: F.pdist(x, p), torch.randn(6, 5), grad=True)


def test_prod_over_all_dims_is_eagers() -> None:
    x = _u(0.4, 1.6, 5, 5, 5)
    x.view(-1)[::2] = torch.tensor([0.5, 2.5, -0.5, -1.5, 1.5, -2.5]).repeat(11)[:63]
    matches_eager(lambda t: torch.prod(t), x)
    matches_eager(lambda t: torch.prod(t, 1), x)


@pytest.mark.parametrize("reduce", ["prod", "mean"])
def test_index_reduce_is_eagers(reduce: str) -> None:
    torch.manual_seed(0)
    x, src = torch.randn(5, 4), torch.randn(9, 4) * 3
    index = torch.tensor([0, 1, 0, 4, 4, 4, 2, 0, 1])
    matches_eager(lambda t, s: t.index_reduce(0, index, s, reduce), x, src)


@pytest.mark.parametrize("name,fn", [
    ("bce", lambda x, y: F.binary_cross_entropy(torch.sigmoid(x), y, reduction="none")),
    ("soft-margin", lambda x, y: F.soft_margin_loss(x * 4, y.detach().sign(), reduction="none")),
])  # fmt: skip
def test_losses_and_gradients_are_eagers(name: str, fn: Callable[..., Any]) -> None:
    torch_compile_matches_eager(fn, _u(-3, 3, 67), _u(-1, 1, 67).abs(), grad=True)


def test_batch_norm_backward_of_an_expanded_gradient_is_eagers() -> None:
    """Eager's kernel sums a broadcast output gradient in another order than the same
    values materialized: the program must hand it the broadcast (96 of 96 off)."""
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 3, 4, 4), torch.randn(3), torch.randn(3)

    def step(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
        rm, rv = torch.zeros(3), torch.ones(3)
        out, mean, invstd = aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        g = torch.ones_like(out.sum()).expand(out.shape)
        return aten.native_batch_norm_backward(g, x, w, rm, rv, mean, invstd, True, 1e-5,
                                               [True, True, True])

    matches_eager(step, x, w, b)


@pytest.mark.parametrize("scale", [1.0, 1 / 128])
def test_conv_weight_gradient_of_a_constant_gradient_is_eagers(scale: float) -> None:
    """``out.sum()`` (or ``mean``) then the backward in one graph: the output gradient
    is a constant (96 of 108 weight-gradient elements were off)."""
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(4)

    def step(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
        out = aten.convolution(x, w, b, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
        g = (torch.ones_like(out.sum()) * scale).expand(out.shape)
        return aten.convolution_backward(g, x, w, [4], [1, 1], [0, 0], [1, 1], False, [0, 0],
                                         1, [True, True, True])

    matches_eager(step, x, w, b)


def test_replayed_training_steps_are_eagers() -> None:
    """The sweep's module samples in small: a training step of ``out.sum()`` replayed
    by adaptive eager (its first-replay check off, so the program's numbers are read)."""
    import torchneuron.adaptive_eager as ae
    from torchneuron.hardware.settings import override

    torch.manual_seed(0)
    for module, shape in ((torch.nn.Conv2d(3, 4, 3), (2, 3, 6, 6)),
                          (torch.nn.BatchNorm2d(3), (2, 3, 4, 4)),
                          (torch.nn.InstanceNorm1d(3), (2, 3, 7)), (torch.nn.ELU(), (3, 23))):
        x = torch.randn(shape)
        cpu_x = x.clone().requires_grad_()
        module(cpu_x).sum().backward()
        want = [cpu_x.grad.clone(), *(p.grad.clone() for p in module.parameters())]
        dev = module.to("neuron")
        dx = x.to("neuron").requires_grad_()
        ae.reset()
        with override(compile_latency=False, ae_first_tier=False, ae_min_gain_ns=-1,
                      ae_verify_first_replay=False), ae.enabled():
            for _ in range(4):
                for t in (dx, *dev.parameters()):
                    t.grad = None
                dev(dx).sum().backward()
                got = [dx.grad.cpu(), *(p.grad.cpu() for p in dev.parameters())]
        assert ae.stats()["replays"] > 0, ae.explain()
        ae.reset()
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            bits_equal(g, w, f"{type(module).__name__} grad {i}")
