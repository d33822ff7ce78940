"""float16/bfloat16 var/std/var_mean/std_mean compiled = eager CPU (decomp_half_var.py):
eager accumulates in double; the lowering's float32 overflowed past 1.8e19 (found by
tools/special_sweep.py)."""

from __future__ import annotations

import pytest
import torch

import torchneuron  # noqa: F401  (the neuron device and backend)

HALVES = [torch.float16, torch.bfloat16]
FNS = {
    "var": lambda x: torch.var(x, 1),
    "std": lambda x: torch.std(x, 1, correction=0),
    "var_mean": lambda x: torch.var_mean(x, (0, 2), keepdim=True),
    "std_mean": lambda x: torch.std_mean(x, 1, correction=2),
    "std_all": lambda x: torch.std(x),
}


def _compiled(fn, x):
    torch._dynamo.reset()
    out = torch.compile(fn, backend="neuron")(x.to("neuron"))
    return tuple(t.cpu() for t in out) if isinstance(out, tuple) else out.cpu()


def _equal(want, got) -> None:
    for w, g in zip(want if isinstance(want, tuple) else (want,),
                    got if isinstance(got, tuple) else (got,), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g.isnan(), w.isnan())
        assert torch.equal(g[~w.isnan()], w[~w.isnan()]), (g, w)


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("name", sorted(FNS))
def test_random_bits(name: str, dtype: torch.dtype) -> None:
    x = (torch.randn(6, 7, 5, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    _equal(FNS[name](x), _compiled(FNS[name], x))


@pytest.mark.parametrize("name", sorted(FNS))
def test_bfloat16_large_values(name: str) -> None:
    x = torch.randn(6, 7, 5, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    x.view(-1)[::13] = 2e19  # squared: past float32's range; the variance is not
    x.view(-1)[6::29] = -3e19
    want = FNS[name](x)
    assert any((torch.isfinite(w) & (w.abs() > 1e18)).any()
               for w in (want if isinstance(want, tuple) else (want,)))
    _equal(want, _compiled(FNS[name], x))
