"""``sigmoid_backward`` compiled = eager bit for bit (``decomp/sigmoid_backward.py``).

ATen's kernel multiplies ``grad * (1 - y) * y`` left to right; PyTorch's decomposition
multiplies ``grad * (y * (1 - y))``, one ulp off in many elements, so every ``nn.Sigmoid``
and GRU gate gradient compiled or replayed missed eager's last bit (a replayed GRU
training step drifted 1.5e-08 from eager in its weights). A ``test_exact_`` file:
``test_bits_per_cpu_capability.py`` runs it again at every CPU capability the machine has.
"""

from __future__ import annotations

import pytest
import torch

import torchneuron  # noqa: F401  (the neuron device and backend)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_sigmoid_backward_is_eagers_bit_for_bit(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(7)
    for n in (1003, 13):  # a run with a scalar tail, a run shorter than a vector pair
        grad = torch.randn(n, generator=g).to(dtype)
        y = (4 * torch.randn(n, generator=g)).sigmoid().to(dtype)
        want = torch.ops.aten.sigmoid_backward(grad, y)
        torch._dynamo.reset()
        got = torch.compile(lambda a, b: torch.ops.aten.sigmoid_backward(a, b) * 1.0,
                            backend="neuron")(grad.to("neuron"), y.to("neuron")).cpu()
        assert torch.equal(got, want), f"{int((got != want).sum())} of {n} differ"


def test_sigmoid_mlp_gradients_are_eagers_bit_for_bit() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Sigmoid(),
                                torch.nn.Linear(16, 1))
    x = torch.randn(64, 8)
    model(x).sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    dev = model.to("neuron")
    for p in dev.parameters():
        p.grad = None
    torch._dynamo.reset()
    torch.compile(lambda t: dev(t).sum(), backend="neuron")(x.to("neuron")).backward()
    for p, w in zip(dev.parameters(), want, strict=True):
        assert torch.equal(p.grad.cpu(), w)
