"""Where ATen computes otherwise for a tensor subclass, the device computes as for a CPU
tensor (``torchneuron.device.plain_paths``), bit for bit.

``prod``'s gradient, on the device and under torch.compile:

ATen's derivative of ``prod`` takes its zero-safe cumprod formula for any tensor subclass
(a neuron tensor, a traced fake) where, for a CPU tensor, it divides the product by each
element unless the input holds a zero (and gives zeros for a whole-tensor product with
two): OpInfo's prod gradient was off in 49 of 125 elements on the device, signed zeros in
68 of 125 with 15 zeros (``tools/opinfo_device.py --ops prod --exact``).
``torchneuron.device.plain_paths`` computes it as the CPU does."""

from __future__ import annotations

import pytest
import torch

import torchneuron  # noqa: F401
from tests.compiler.exact import bits_equal

FORMS = {"whole": lambda t: t.prod(), "dim": lambda t: t.prod(1),
         "keepdim": lambda t: t.prod(0, keepdim=True)}


def _input(zeros: int) -> torch.Tensor:
    x = torch.randn(4, 5, 3, generator=torch.Generator().manual_seed(zeros))
    x.view(-1)[[3 + 7 * j for j in range(zeros)]] = 0
    return x


def _grad(f, x: torch.Tensor, g: torch.Tensor, **kw) -> torch.Tensor:  # noqa: ANN001
    x = x.clone().requires_grad_()
    (got,) = torch.autograd.grad(f(x), x, g, **kw)
    return got


@pytest.mark.parametrize("zeros", [0, 1, 2])
@pytest.mark.parametrize("form", ["whole", "dim"])
def test_prod_gradient_on_the_device_and_compiled(form: str, zeros: int) -> None:
    f, x = FORMS[form], _input(zeros)
    g = torch.randn(f(x).shape, generator=torch.Generator().manual_seed(9))
    want = _grad(f, x, g)
    bits_equal(_grad(f, x.to("neuron"), g.to("neuron")).cpu(), want, "device eager")
    torch._dynamo.reset()
    bits_equal(_grad(torch.compile(f, backend="neuron"), x.to("neuron"), g.to("neuron")).cpu(),
               want, "torch.compile")


@pytest.mark.parametrize("zeros", [0, 1, 5])
def test_prod_second_derivative_and_functorch_on_the_device(zeros: int) -> None:
    f, x = FORMS["keepdim"], _input(zeros)

    def second(x: torch.Tensor) -> torch.Tensor:
        x = x.clone().requires_grad_()
        (g,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
        (h,) = torch.autograd.grad(g.square().sum(), x)
        return h

    bits_equal(second(x.to("neuron")).cpu(), second(x), "second derivative")
    whole = torch.func.grad(lambda t: t.prod())
    bits_equal(whole(x.to("neuron")).cpu(), whole(x), "torch.func.grad")


@pytest.mark.parametrize("grad", [False, True])
def test_singular_values_and_eigenvalues_on_the_device(grad: bool) -> None:
    """ATen asks LAPACK for the vectors too when a gradient may need them or the tensor
    is a subclass, and the values then round differently: ``svdvals`` of OpInfo's first
    sample was off in 4 of 5 values on the device, the nuclear norm, ``cond`` and
    ``eigvalsh`` with it (``tools/opinfo_device.py --exact --no-grad``)."""
    a = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(8))
    s = a @ a.mT
    fns = {"svdvals": lambda a, s: torch.linalg.svdvals(a),
           "nuclear norm": lambda a, s: torch.linalg.matrix_norm(a, "nuc"),
           "cond": lambda a, s: torch.linalg.cond(a[:, :4]),
           "eigvalsh": lambda a, s: torch.linalg.eigvalsh(s)}
    for what, f in fns.items():
        want = f(a.clone().requires_grad_(grad), s.clone().requires_grad_(grad))
        got = f(a.to("neuron").requires_grad_(grad), s.to("neuron").requires_grad_(grad))
        bits_equal(got.detach().cpu(), want.detach(), what)
