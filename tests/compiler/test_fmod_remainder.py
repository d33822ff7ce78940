"""Compiled ``fmod`` / ``remainder`` / ``%`` of float32, float16 and bfloat16 give eager's
values. Torch-MLIR computed ``a - trunc(a / b) * b`` in the input dtype, off by a whole
divisor where the rounded quotient reached the next integer: ``fmod(3.0, 0.3)`` compiled
gave 0 (eager 0.29999989), ``remainder(-3.0, 0.3)`` -0.3 (eager 1.2e-07). Compared with
eager CPU (NaN positions included); integers are checked so the change leaves them right."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import torchneuron  # noqa: F401  (registers the backend and device)
from torchneuron.compiler import compile_graph

INF = float("inf")
FLOAT_A = [3.0, -3.0, 7.5, -7.5, 0.0, -0.0, 1e5, INF, 5.0, -0.6, 2.0, 0.9]
FLOAT_B = [0.3, 0.3, -2.0, 2.0, 0.3, 0.7, 0.3, 1.0, INF, 0.3, 0.1, -0.3]
OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "fmod": torch.fmod,
    "remainder": torch.remainder,
    "percent": lambda a, b: a % b,
    "fmod_scalar": lambda a, b: torch.fmod(a, 0.3),
    "remainder_scalar": lambda a, b: torch.remainder(a, -0.3),
    "scalar_remainder": lambda a, b: torch.remainder(5, b),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("name", list(OPS))
def test_compiled_matches_eager(name: str, dtype: torch.dtype) -> None:
    if dtype.is_floating_point:
        a, b = torch.tensor(FLOAT_A).to(dtype), torch.tensor(FLOAT_B).to(dtype)
    else:
        a = torch.tensor([7, -7, 9, -9, 0, 3, 100, 5, 5, 3], dtype=dtype)
        b = torch.tensor([2, 2, -4, 4, 3, -3, 7, 1, 3, 5], dtype=dtype)
    fn = OPS[name]
    want = fn(a, b)
    # (a bfloat16 scalar becomes a bfloat16 constant, which Torch-MLIR's importer writes
    # through ml_dtypes, a dependency since session 13; before, bfloat16 was refused)
    (got,) = compile_graph(fn, [a, b]).run([a, b])
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
