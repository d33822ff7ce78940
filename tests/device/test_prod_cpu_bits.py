"""``prod``'s gradient is CPU eager's, bit for bit, on the device and under torch.compile.

ATen's derivative of ``prod`` takes its zero-safe cumprod formula for any tensor subclass
(a neuron tensor, a traced fake) where, for a CPU tensor, it divides the product by each
element unless the input holds a zero (and gives zeros for a whole-tensor product with
two): OpInfo's prod gradient was off in 49 of 125 elements on the device, signed zeros in
68 of 125 with 15 zeros (``tools/opinfo_device.py --ops prod --exact``).
``torchneuron.device.cpu_paths`` computes it as the CPU does."""

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
