"""``lerp`` compiled = eager bit for bit on this CPU, whichever form its eager takes
(``decomp/lerp.py``): ATen's vector body is a fused multiply-add in the AVX2 build and two
roundings in the ``default`` build; the compiler checks samples of eager per CPU and uses
the matching form, or refuses (float64 where eager fuses). A ``test_exact_`` file:
``test_bits_per_cpu_capability.py`` runs it again at every CPU capability the machine has.
Before, the compiled lerp was PyTorch's unfused decomposition, and AdamW's
``exp_avg.lerp_(grad, 1 - beta1)`` missed eager's last bit under torch.compile and in
adaptive eager's replays.
"""

from __future__ import annotations

import pytest
import torch

import torchneuron
from torchneuron import adaptive_eager
from torchneuron.hardware.settings import override


def _bits(got: torch.Tensor, want: torch.Tensor) -> None:
    same = (got == want) | (got.isnan() & want.isnan())
    assert bool(same.all()), f"{int((~same).sum())} of {want.numel()} differ"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_lerp_is_eagers_bit_for_bit(dtype: torch.dtype) -> None:
    """Scalar weights on both sides of 0.5 and beyond 1, a tensor weight, a run with a
    scalar tail (1003) and a short one (13)."""
    g = torch.Generator().manual_seed(5)
    for n in (1003, 13):
        a, b = (torch.randn(n, generator=g).mul(3).to(dtype) for _ in range(2))
        w = (torch.rand(n, generator=g) * 1.4 - 0.2).to(dtype)

        def fn(x: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (torch.lerp(x, y, 0.1), torch.lerp(x, y, 0.9), torch.lerp(x, y, -3.7),
                    torch.lerp(x, y, t))

        want = fn(a, b, w)
        torch._dynamo.reset()
        got = torch.compile(fn, backend="neuron")(a.to("neuron"), b.to("neuron"), w.to("neuron"))
        for gt, wt in zip(got, want, strict=True):
            _bits(gt.cpu(), wt)


def test_replayed_lerp_is_eagers_bit_for_bit() -> None:
    """In adaptive eager's replayed regions too (the first moment's update of Adam and
    AdamW: ``exp_avg.lerp_(grad, 1 - beta1)``), and lerp is compiled, not run between
    regions."""
    g = torch.Generator().manual_seed(6)
    a, b = torch.randn(257, generator=g), torch.randn(257, generator=g)

    def step(m: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        return m.clone().lerp_(grad, 1 - 0.9).lerp_(grad * 0.5, 0.75)

    want = step(a, b)
    torchneuron.reset()
    adaptive_eager.enable()
    try:
        with override(ae_min_gain_ns=-1, ae_first_tier=False):
            ad, bd = a.to("neuron"), b.to("neuron")
            got = [step(ad, bd).cpu() for _ in range(8)]
        stats = adaptive_eager.stats()
    finally:
        adaptive_eager.disable()
    for g_ in got:
        _bits(g_, want)
    assert stats["replays"] - stats["first_tier_replays"] > 0, stats
    assert not any("lerp" in op for op in stats["refused_ops"]), stats


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_quantile_interpolation_is_eagers_lerp(dtype: torch.dtype) -> None:
    """PyTorch's ``quantile`` decomposition runs above functionalization and interpolates
    with the in-place ``lerp_``, whose table entry was the Python reference (two roundings
    where eager's kernel fuses: 161 of 200 random (3, 5) inputs off in the last bit); it is
    now ``lerp`` (eager's kernel) and a copy (``eager_kernel_table._inplace_entry``)."""
    from tests.compiler.exact import cases_match_eager

    g = torch.Generator().manual_seed(0)
    x = (torch.randn(7, 9, generator=g) * 5).to(dtype)
    q = torch.rand(3, generator=g).to(dtype)
    cases_match_eager({
        "quantile": lambda a, p: torch.quantile(a, p, dim=0),
        "nanquantile": lambda a, p: torch.nanquantile(a, p, dim=1, keepdim=True),
        "midpoint": lambda a, p: torch.quantile(a, p, interpolation="midpoint"),
    }, x, q)
