"""Fixes from the exact all-samples lowering sweep of session 10
(``tools/lowering_coverage.py --exact``, every OpInfo sample in float32): compiled
results equal eager's bits.

Determinants are LAPACK's LU and the product of its diagonal: decomp/lu's unrolled LU
is not LAPACK's order, and OpInfo's ``linalg.det`` of a [3, 5, 5] batch was off in the
last bit (slogdet and logdet of 5x5 to 12x12 matrices alike); they are eager's kernels
in the program now (decomp/eager_kernels.py)."""

from __future__ import annotations

import torch

from tests.compiler.exact import cases_match_eager, torch_compile_matches_eager

_g = torch.Generator().manual_seed(0)
A = torch.randn(3, 5, 5, generator=_g)
B = torch.randn(6, 6, generator=_g)
C = torch.randn(2, 12, 12, generator=_g)


def test_determinants_are_eagers_bits() -> None:
    cases = {}
    for i in range(3):
        cases[f"det{i}"] = lambda *xs, i=i: torch.linalg.det(xs[i])
        cases[f"slogdet{i}"] = lambda *xs, i=i: torch.linalg.slogdet(xs[i])
        cases[f"logdet{i}"] = lambda *xs, i=i: torch.logdet(xs[i] @ xs[i].mT)
    cases_match_eager(cases, A, B, C)


def test_determinant_through_torch_compile_with_its_gradient() -> None:
    torch_compile_matches_eager(torch.linalg.det, A, grad=True)
