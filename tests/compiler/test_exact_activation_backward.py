"""``tanh_backward`` and ``sigmoid_backward`` compiled = eager bit for bit.

``tanh_backward`` (``decomp/tanh_backward.py``): the AVX2 build of eager contracts
``1 - y * y`` into a fused multiply-add, the ``default`` build does not; the compiler checks
samples of eager per CPU and uses the matching form, or refuses (float64 where eager
fuses). Before, 285 of 1003 random float32 elements differed on AVX2.

``sigmoid_backward`` (eager's kernel in the program, ``decomp/eager_kernels.py``): ATen's
kernel multiplies ``grad * (1 - y) * y`` left to right; PyTorch's decomposition multiplies
``grad * (y * (1 - y))``, one ulp off in many elements (a replayed GRU training step
drifted 1.5e-08 from eager in its weights).

So every ``nn.Tanh`` and ``nn.Sigmoid`` gradient compiled or replayed missed eager's last
bit. A ``test_exact_`` file: ``test_bits_per_cpu_capability.py`` runs it again at every
CPU capability the machine has.
"""

from __future__ import annotations

import pytest
import torch

import torchneuron  # noqa: F401  (the neuron device and backend)

# (name, module, scale of the pre-activation: sigmoid's tails need a wider range)
_ACTIVATIONS = [("tanh", torch.nn.Tanh, 1.0), ("sigmoid", torch.nn.Sigmoid, 4.0)]


@pytest.mark.parametrize(("name", "module", "scale"), _ACTIVATIONS, ids=[a[0] for a in _ACTIVATIONS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_activation_backward_is_eagers_bit_for_bit(dtype: torch.dtype, name: str,
                                                   module: type, scale: float) -> None:
    backward = getattr(torch.ops.aten, f"{name}_backward")
    g = torch.Generator().manual_seed(7)
    for n in (1003, 13):  # a run with a scalar tail, a run shorter than a vector pair
        grad = torch.randn(n, generator=g).to(dtype)
        y = getattr(scale * torch.randn(n, generator=g), name)().to(dtype)
        want = backward(grad, y)
        torch._dynamo.reset()
        got = torch.compile(lambda a, b: backward(a, b) * 1.0,
                            backend="neuron")(grad.to("neuron"), y.to("neuron")).cpu()
        assert torch.equal(got, want), f"{int((got != want).sum())} of {n} differ"


@pytest.mark.parametrize(("name", "module", "scale"), _ACTIVATIONS, ids=[a[0] for a in _ACTIVATIONS])
def test_activation_mlp_gradients_are_eagers_bit_for_bit(name: str, module: type,
                                                         scale: float) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), module(), torch.nn.Linear(16, 1))
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
