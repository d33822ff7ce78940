"""``relu`` / ``clamp`` / ``hardtanh`` / ``leaky_relu`` at signed zeros and NaN, bit for bit.

Eager replaces an element only when it is strictly beyond a bound, so ``relu(-0.0)`` is
-0.0 and ``clamp(0.0, min=-0.0)`` is 0.0; the lowering's IEEE max/min gave the other
zero. ``leaky_relu(-0.0)`` is -0.0 in eager (``x * slope``), and float16 multiplies by the
slope in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.exact import INF, NAN, cases_match_eager, torch_compile_matches_eager
from torchneuron.compiler import CompileError, compile_graph

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_VALUES = [-0.0, 0.0, NAN, 1.0, -1.0, INF, -INF, 1e-40, -1e-40, 6.0, 7.0, -6.0, 0.5, -0.5,
           1e-8, -1e-8, 20.0, -20.0, 0.1, -0.1]

CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "relu": torch.relu,
    "F.relu": F.relu,
    "relu_": lambda a: torch.relu_(a.clone()),
    "relu6": F.relu6,
    "hardtanh": F.hardtanh,
    "hardtanh(0,6)": lambda a: F.hardtanh(a, 0.0, 6.0),
    "hardtanh(-0,0)": lambda a: F.hardtanh(a, -0.0, 0.0),
    "clamp(min=0)": lambda a: a.clamp(min=0),
    "clamp(min=-0)": lambda a: a.clamp(min=-0.0),
    "clamp(max=0)": lambda a: a.clamp(max=0.0),
    "clamp(max=-0)": lambda a: a.clamp(max=-0.0),
    "clamp(0,-0)": lambda a: a.clamp(0.0, -0.0),
    "clamp(2,1)": lambda a: a.clamp(2.0, 1.0),
    "clamp(nan)": lambda a: a.clamp(min=NAN),
    "clamp(max=nan)": lambda a: a.clamp(max=NAN),
    "clamp_min": lambda a: a.clamp_min(0.0),
    "clamp_max": lambda a: a.clamp_max(-0.0),
    "leaky_relu": F.leaky_relu,
    "leaky_relu(0)": lambda a: F.leaky_relu(a, 0.0),
    "leaky_relu(-0.5)": lambda a: F.leaky_relu(a, -0.5),
    "threshold": lambda a: F.threshold(a, 0.0, -0.0),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_relu_family_at_signed_zeros_matches_eager(dtype: torch.dtype) -> None:
    cases_match_eager(CASES, torch.tensor(_VALUES, dtype=torch.float64).to(dtype))


_TENSOR_BOUNDS: dict[str, Callable[..., Any]] = {
    "clamp(lo,hi)": torch.clamp,
    "clamp(min=lo)": lambda a, lo, hi: torch.clamp(a, min=lo),
    "clamp(max=hi)": lambda a, lo, hi: torch.clamp(a, max=hi),
    "clamp_min(lo)": lambda a, lo, hi: torch.clamp_min(a, lo),
    "clamp(0d float32)": lambda a, lo, hi: torch.clamp(a, torch.tensor(0.0), torch.tensor(-0.0)),
}


@pytest.mark.same_on_every_cpu  # refused whatever the values: eager against eager
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", sorted(_TENSOR_BOUNDS))
def test_clamp_by_tensor_bounds_is_refused_and_runs_eagerly(case: str, dtype: torch.dtype) -> None:
    """Eager's clamp by a tensor bound at a (-0.0, 0.0) tie gives the bound in its
    vectorised loop and the element in the scalar tail: refused, so it runs eagerly.
    (A lowering that took it would fail the refusal check here, and would have to drop
    the ``same_on_every_cpu`` mark: its bits would then depend on the CPU path.)"""
    n = 40  # a vectorised body and a scalar tail for every dtype
    v = torch.tensor([-0.0, 0.0, NAN, 1.0, -1.0, INF, -INF, 2.0] * 5, dtype=dtype)[:n]
    lo = torch.tensor([0.0, -0.0, 0.0, NAN, NAN, 0.0, 1.0, 3.0] * 5, dtype=dtype)[:n]
    hi = torch.tensor([-0.0, 0.0, 1.0, 1.0, NAN, NAN, 0.0, 1.0] * 5, dtype=dtype)[:n]
    fn = _TENSOR_BOUNDS[case]
    with pytest.raises(CompileError, match="clamp"):
        compile_graph(fn, [v, lo, hi])
    torch_compile_matches_eager(fn, v, lo, hi)


def test_torch_compile_relu_and_clamp_with_gradients_match_eager() -> None:
    x = torch.tensor(_VALUES[:2] + _VALUES[3:])  # no NaN: its gradient is not the point

    def f(a: torch.Tensor) -> torch.Tensor:
        return torch.relu(a) + F.relu6(a * 2) - a.clamp(-0.0, 0.0) + F.leaky_relu(-a)

    torch_compile_matches_eager(f, x, grad=True)
    torch_compile_matches_eager(lambda a: torch.relu(a).neg(), torch.tensor([-0.0, 0.0, NAN]))
