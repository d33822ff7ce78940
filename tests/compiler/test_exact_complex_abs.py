"""Complex ``abs`` / ``sgn``: complex64 bit for bit with eager, complex128 refused.

Eager's complex64 |z| is a correctly rounded hypot; the lowering's scaled formula
(max * sqrt(1 + (min/max)^2)) was an ulp off on many values. Eager's complex128 |z| rounds
differently in its vectorised loop and its scalar tail, so it is refused (``complex-op``)
and runs eagerly.
"""

from __future__ import annotations

import pytest
import torch

from tests.compiler.exact import INF, NAN, matches_eager, torch_compile_matches_eager
from torchneuron.compiler import CompileError, compile_graph


def _values(dtype: torch.dtype, n: int = 4000) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    re = torch.randn(n, generator=g, dtype=torch.float64) * 10
    im = torch.randn(n, generator=g, dtype=torch.float64)
    re[:6] = torch.tensor([3e20, 3e-40, INF, NAN, 0.0, -0.0])
    im[:6] = torch.tensor([4e20, 4e-40, NAN, 1.0, -0.0, 0.0])
    return torch.complex(re, im).to(dtype)


def test_complex64_abs_and_sgn_match_eager() -> None:
    """Compiled with eager's bits where this CPU's eager is the correctly rounded hypot
    (its vectorised loop); refused where it is not (``ATEN_CPU_CAPABILITY=default``), and
    then torch.compile runs it eagerly, with eager's bits too."""
    z = _values(torch.complex64)
    fn = lambda x: (x.abs(), torch.view_as_real(x.sgn()))  # noqa: E731
    matches_eager(fn, z, refused_ok=torch.backends.cpu.get_cpu_capability() == "DEFAULT")
    torch_compile_matches_eager(fn, z)


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() == "DEFAULT",
                    reason="no vectorised loop at ATEN_CPU_CAPABILITY=default")
def test_eager_complex128_abs_depends_on_the_loop() -> None:
    z = _values(torch.complex128)
    alone = torch.stack([z[i:i + 1].abs()[0] for i in range(len(z))])
    assert not torch.equal(z.abs()[6:], alone[6:])


@pytest.mark.same_on_every_cpu
def test_complex128_abs_is_refused_and_runs_eagerly() -> None:
    z = _values(torch.complex128)
    try:
        compile_graph(lambda x: x.abs(), [z])
    except CompileError as e:
        assert e.stage == "prepare"
    else:
        raise AssertionError("complex128 abs compiled")
    torch_compile_matches_eager(lambda x: x.abs() * 2, z)
