"""Integer average pooling gives eager's int64 result: a lowering returned a float32 average
where eager keeps int64 (found by tools/special_sweep.py); it was refused, and is eager's
own kernel in the program now, as every average pool (decomp/eager_kernels.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchneuron


def _compiled(fn, x):
    torch._dynamo.reset()
    before = torchneuron.compiler.stats()
    out = torch.compile(fn, backend="neuron")(x.to("neuron")).cpu()
    after = torchneuron.compiler.stats()
    return out, after["compilations"] - before["compilations"], \
        after["failures"] - before["failures"]


CASES = {
    "2d": lambda x: F.avg_pool2d(x, 3, 1, 1, True, False, 2),
    "2d_trunc": lambda x: F.avg_pool2d(x, 2),
    "1d": lambda x: F.avg_pool1d(x.flatten(2), 3, 2, 1),
    "3d": lambda x: F.avg_pool3d(x[None], (1, 2, 2), ceil_mode=True),
}


@pytest.mark.same_on_every_cpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_int64_matches_eager(case: str) -> None:
    fn = CASES[case]
    x = torch.randint(-9, 9, (1, 3, 9, 9), generator=torch.Generator().manual_seed(0))
    want = fn(x)
    got, _, failures = _compiled(fn, x)
    assert got.dtype == want.dtype == torch.int64
    assert torch.equal(got, want)
    assert failures == 0  # compiled: eager's kernel in the program


@pytest.mark.same_on_every_cpu
def test_float_still_compiles() -> None:
    x = torch.randn(1, 3, 9, 9)
    fn = CASES["2d"]
    got, compiled, failures = _compiled(fn, x)
    assert compiled >= 1 and failures == 0
    torch.testing.assert_close(got, fn(x))
