"""Compiled ``addcdiv`` / ``addcmul`` (Adam's update) bit for bit as eager CPU.

Found by ``tools/special_sweep.py``: float32 ``addcdiv`` differed in the last bit on about a
third of random elements (``self + value * (t1 / t2)`` against eager's ``self + (value *
t1) / t2``) and gave a finite number where eager overflows to inf; half-precision
``addcmul`` rounded at every step. ``addcmul`` takes the form (fused multiply-add or
not) this CPU's eager computes, so every dtype is compared bit for bit; float64 is refused
where eager fuses it (``cpu-dependent-premise``: no wider type to emulate the fused step).
"""

from __future__ import annotations

import pytest
import torch

import torchneuron  # noqa: F401  (registers the backend and device)
from torchneuron.compiler import CompileError, compile_graph

NAN, INF = float("nan"), float("inf")


def _operands(dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    s, a, b = (torch.randn(400, generator=g, dtype=torch.float64) for _ in range(3))
    a[:6] = torch.tensor([3e38, 2.0, -1.0, NAN, INF, 1e-30])
    b[:6] = torch.tensor([1e-3, 0.0, -0.0, 1.0, 2.0, 1e-10])
    s[:6] = torch.tensor([0.0, -0.0, 1.0, 2.0, -INF, 0.0])
    return [s.to(dtype), a.to(dtype), b.to(dtype)]


def _bits_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan())
    keep = ~want.isnan()
    assert torch.equal(got[keep], want[keep]), (got[keep] != want[keep]).sum()
    assert torch.equal(got[keep].signbit(), want[keep].signbit())


def _addc(s: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (torch.addcdiv(s, a, b, value=-0.37), torch.addcdiv(s, a, b),
            torch.addcmul(s, a, b, value=0.37), torch.addcmul(s, a, b))


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.float16, torch.bfloat16))
def test_addcdiv_addcmul_match_eager_bitwise(dtype: torch.dtype) -> None:
    xs = _operands(dtype)
    try:
        got = compile_graph(_addc, xs).run(xs)
    except CompileError as e:  # float64 where this CPU's eager fuses addcmul
        assert dtype == torch.float64 and e.reason == "cpu-dependent-premise", e
        return
    want = _addc(*[x.clone() for x in xs])
    for g, w in zip(got, want, strict=True):
        _bits_equal(g, w)


def test_adam_like_in_place_update_under_torch_compile_matches_eager() -> None:
    """Through Dynamo and AOTAutograd. (Dynamo itself rewrites ``torch.addcdiv(...,
    value=v)`` into div, mul, add and the in-place ``addcmul_`` / ``addcdiv_`` with a value
    into ``inductor_prims.fma`` before any backend sees them; those forms are left out.)"""

    def step(p: torch.Tensor, m: torch.Tensor, v: torch.Tensor, g: torch.Tensor) -> None:
        m.mul_(0.9).add_(g * 0.1)
        v.copy_(torch.addcmul(v * 0.999, g, g, value=0.001))
        p.copy_(torch.addcdiv(p, m * -1e-3, v.sqrt() + 1e-8))

    xs = [x.float() for x in _operands(torch.float64)[:3]]
    xs = [x.nan_to_num(0.0, 1.0, -1.0) for x in xs] + [xs[1].nan_to_num(0.0, 3.0, -3.0) * 0.1]
    xs[2] = xs[2].abs()
    want = [x.clone() for x in xs]
    step(*want)
    got = [x.to("neuron") for x in xs]
    torch._dynamo.reset()
    before = torchneuron.compiler.stats()["compilations"]
    torch.compile(step, backend="neuron")(*got)
    assert torchneuron.compiler.stats()["compilations"] > before
    p, m, v, _ = (g.cpu() for g in got)
    _bits_equal(m, want[1])  # no addcmul in its update
    for g, w in ((p, want[0]), (v, want[2])):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=0, equal_nan=True)
