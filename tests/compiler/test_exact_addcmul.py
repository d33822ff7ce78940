"""``addcmul`` compiled = eager bit for bit on this CPU, whichever form its eager takes
(decomp_addc.py): the AVX2 build fuses ``self + (value * t1) * t2`` into one multiply-add,
the ``default`` build does not; the compiler checks a sample of eager per CPU and uses the
matching form, or refuses. A ``test_exact_`` file: ``test_bits_per_cpu_capability.py`` runs
it again at every CPU capability the machine has. Before, every float32 ``addcmul`` was the
unfused form (the replay sweep's LAST-BIT, issue 22): 224 of 1000 elements differed on AVX2.
"""

from __future__ import annotations

import pytest
import torch

import torchneuron  # noqa: F401  (the neuron device and backend)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_addcmul_is_eagers_bit_for_bit(dtype: torch.dtype) -> None:
    value = 0.3  # not a power of two: value * t1 rounds
    g = torch.Generator().manual_seed(3)
    a, b, c = (torch.randn(1003, generator=g).mul(3).to(dtype) for _ in range(3))
    want = torch.addcmul(a, b, c, value=value)
    torch._dynamo.reset()
    got = torch.compile(lambda x, y, z: torch.addcmul(x, y, z, value=value), backend="neuron")(
        a.to("neuron"), b.to("neuron"), c.to("neuron")).cpu()
    assert torch.equal(got, want), f"{int((got != want).sum())} of {want.numel()} differ"


def test_in_place_addcmul_as_adam_writes_it() -> None:
    """``exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)``."""
    g = torch.Generator().manual_seed(4)
    sq, grad = torch.rand(517, generator=g), torch.randn(517, generator=g)

    def step(s: torch.Tensor, gr: torch.Tensor) -> torch.Tensor:
        return s.mul_(0.999).addcmul_(gr, gr, value=1 - 0.999)

    want = step(sq.clone(), grad)
    torch._dynamo.reset()
    dev = sq.to("neuron")
    torch.compile(step, backend="neuron")(dev, grad.to("neuron"))
    assert torch.equal(dev.cpu(), want)
