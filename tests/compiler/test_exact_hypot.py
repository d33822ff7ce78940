"""float64 ``hypot``: refused (``hypot-float64``) and run eagerly, so torch.compile gives
eager's bits; before, the scaled formula was an ulp off on about one value in ten.

Eager's own float64 result depends on the loop an element meets: its vectorised loop
rounds correctly, its scalar tail (the C library's hypot) is an ulp off now and then.
"""

from __future__ import annotations

import pytest
import torch

from tests.compiler.exact import torch_compile_matches_eager
from torchneuron.compiler import CompileError, compile_graph


def _operands(n: int = 2000) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    a = torch.randn(n, generator=g, dtype=torch.float64) * 10 ** torch.randint(
        -5, 6, (n,), generator=g)
    b = torch.randn(n, generator=g, dtype=torch.float64)
    a[:4] = torch.tensor([float("inf"), float("nan"), 0.0, -0.0], dtype=torch.float64)
    b[:4] = torch.tensor([float("nan"), -float("inf"), -0.0, 0.0], dtype=torch.float64)
    return a, b


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() == "DEFAULT",
                    reason="no vectorised loop at ATEN_CPU_CAPABILITY=default")
def test_eager_float64_hypot_depends_on_the_loop() -> None:
    """Why float64 is refused: element 391 of these operands rounds differently alone."""
    a, b = _operands()
    in_block = torch.hypot(a, b)
    alone = torch.stack([torch.hypot(a[i:i + 1], b[i:i + 1])[0] for i in range(len(a))])
    assert not torch.equal(in_block[4:], alone[4:])


@pytest.mark.same_on_every_cpu
def test_float64_hypot_is_refused_with_its_reason() -> None:
    a, b = _operands()
    with pytest.raises(CompileError) as info:
        compile_graph(lambda x, y: torch.hypot(x, y) * 2, [a, b])
    assert info.value.reason == "hypot-float64" and info.value.stage == "prepare"


def test_float64_hypot_under_torch_compile_gives_eagers_bits() -> None:
    a, b = _operands()
    torch_compile_matches_eager(lambda x, y: torch.hypot(x, y) + 1, a, b)
    torch_compile_matches_eager(lambda x, y: torch.hypot(x, y.float()), a, b)  # promotes
    torch_compile_matches_eager(lambda x, y: torch.hypot(x, y), a, b, grad=True)


def test_float32_hypot_still_compiles() -> None:
    a, b = (t.float() for t in _operands())
    (got,) = compile_graph(torch.hypot, [a, b]).run([a, b])
    want = torch.hypot(a, b)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~want.isnan()], want[~want.isnan()])
