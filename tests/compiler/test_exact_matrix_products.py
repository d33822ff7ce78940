"""Matrix products below BLAS's size are eager's bits: eager's ``mm`` calls BLAS at every
size, its ``bmm`` sums a product of under 400 multiply-adds in a loop of its own, and the
interpreter took every ``dot_general`` as a ``bmm`` (a 4x4 by 4x16 product was off in 28
of 64 elements, a tiny MLP's compiled gradients in 51 of 128)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import torchneuron  # noqa: F401
from tests.compiler.exact import bits_equal
from torchneuron.compiler import compile_graph


@pytest.mark.parametrize("shapes", [((4, 4), (4, 16)), ((16, 4), (4, 8)), ((3, 5), (5, 2))])
def test_small_matrix_products(shapes: tuple) -> None:
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, generator=g) for s in shapes)

    def f(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return a.mm(b), a.t().t().mm(b) * 2, (a @ b.t().t()).relu()

    for got, want in zip(compile_graph(f, [a, b]).run([a, b]), f(a, b), strict=True):
        bits_equal(got, want)


def test_small_batched_product_stays_a_batched_product() -> None:
    """Eager's own ``bmm`` of the same small sizes: its loop, not BLAS."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(3, 4, 4, generator=g), torch.randn(3, 4, 5, generator=g)
    (got,) = compile_graph(lambda a, b: (torch.bmm(a, b),), [a, b]).run([a, b])
    bits_equal(got, torch.bmm(a, b))


def test_tiny_mlp_training_step_under_torch_compile() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    device_model = copy.deepcopy(model).to("neuron")
    x = torch.randn(4, 8)

    def step(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        loss = m(x).square().mean()
        loss.backward()
        return loss

    torch._dynamo.reset()
    bits_equal(torch.compile(step, backend="neuron")(device_model, x.to("neuron")).cpu(),
               step(model, x))
    for p, q in zip(model.parameters(), device_model.parameters(), strict=True):
        bits_equal(q.grad.cpu(), p.grad)


@pytest.mark.parametrize("shapes", [((10,), (5, 10, 5)), ((7,), (2, 3, 7, 4)),
                                    ((3, 6, 4), (4,)), ((6,), (2, 6, 3))])
def test_vector_times_batch_takes_eagers_path(shapes: tuple) -> None:
    """``matmul`` of a vector and a batch of matrices: PyTorch's Python decomposition
    folded it into an ``mv`` of the batch (its fold check reads the untransposed layout),
    where eager broadcasts the vector into a ``bmm``; [10] by [5, 10, 5] was one ulp off
    (OpInfo's sample, found by the lowering sweep with all samples)."""
    from tests.compiler.exact import torch_compile_matches_eager

    g = torch.Generator().manual_seed(3)
    a, b = (torch.randn(*s, generator=g) for s in shapes)
    want = torch.matmul(a, b)
    bits_equal(compile_graph(torch.matmul, [a, b]).run([a, b])[0], want, "compile_graph")
    torch_compile_matches_eager(torch.matmul, a, b, grad=True)


@pytest.mark.parametrize(("shapes", "grads"), [
    (((5, 5, 5), (1, 5, 5)), (False, False)), (((5, 5, 5), (1, 5, 5)), (True, False)),
    (((5, 5, 5), (1, 5, 5)), (False, True)), (((1, 4, 3), (6, 3, 2)), (False, True))])
def test_batch_of_one_takes_eagers_path(shapes: tuple, grads: tuple) -> None:
    """A 3-D by 3-D ``matmul`` with a batch of 1: ATen broadcasts plain tensors into a
    ``bmm``, but squeezes the batch of 1 into one ``mm`` for an operand that requires grad
    or is a tensor subclass, which a neuron tensor and a traced tensor are: device eager
    and every compiled graph took the ``mm`` where CPU eager took the ``bmm`` (OpInfo's
    [5, 5, 5] by [1, 5, 5]: 22 of 25 rows off in the last bits, found by the lowering
    sweep with all samples). Device eager, compile_graph and torch.compile, forward and
    gradients, against CPU eager."""
    g = torch.Generator().manual_seed(4)
    xs = [torch.randn(*s, generator=g) for s in shapes]
    cpu = [x.clone().requires_grad_(r) for x, r in zip(xs, grads, strict=True)]
    dev = [x.to("neuron").requires_grad_(r) for x, r in zip(xs, grads, strict=True)]
    want = torch.matmul(*cpu)
    got = torch.matmul(*dev)
    bits_equal(got.detach().cpu(), want.detach(), "device eager")
    if any(grads):
        want.square().sum().backward()
        got.square().sum().backward()
        for c, d in zip(cpu, dev, strict=True):
            if c.requires_grad:
                bits_equal(d.grad.cpu(), c.grad, "device eager's gradient")
    else:
        bits_equal(compile_graph(torch.matmul, xs).run(xs)[0], want, "compile_graph")
    torch._dynamo.reset()
    cdev = [x.to("neuron").requires_grad_(r) for x, r in zip(xs, grads, strict=True)]
    compiled = torch.compile(lambda a, b: torch.matmul(a, b).square().sum(), backend="neuron")
    loss = compiled(*cdev)
    bits_equal(loss.detach().cpu(), want.detach().square().sum(), "torch.compile")
    if any(grads):
        loss.backward()
        for c, d in zip(cpu, cdev, strict=True):
            if c.requires_grad:
                bits_equal(d.grad.cpu(), c.grad, "torch.compile's gradient")
