"""Householder QR (compiler/decomp_qr.py) compiled = eager CPU (LAPACK): geqrf's reflectors
and taus, Q and R in every mode, orgqr, ormqr from either side. Refused before (no
lowering for any of them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.compiler.compiled import assert_compiles_to_eager

_g = torch.Generator().manual_seed(0)
TALL = torch.randn(3, 5, 4, generator=_g)
WIDE = torch.randn(2, 3, 5, generator=_g)
RANK = torch.zeros(2, 3, 3)
RANK[0] = torch.randn(3, 3, generator=_g)  # batch 1 all zero: tau 0, H = I
C = torch.randn(3, 5, 2, generator=_g)

CASES: dict[str, tuple[Callable[..., Any], list[torch.Tensor]]] = {
    "geqrf": (torch.geqrf, [TALL]),
    "geqrf_wide": (torch.geqrf, [WIDE]),
    "geqrf_zero_column": (torch.geqrf, [RANK]),
    "qr": (torch.linalg.qr, [TALL]),
    "qr_wide": (torch.linalg.qr, [WIDE]),
    "qr_complete": (lambda a: torch.linalg.qr(a, mode="complete"), [TALL]),
    "qr_r": (lambda a: torch.linalg.qr(a, mode="r")[1], [TALL]),
    "householder_product": (lambda a: torch.linalg.householder_product(*torch.geqrf(a)), [TALL]),
    "ormqr": (lambda a, c: torch.ormqr(*torch.geqrf(a), c), [TALL, C]),
    "ormqr_transpose": (lambda a, c: torch.ormqr(*torch.geqrf(a), c, transpose=True), [TALL, C]),
    "ormqr_right": (lambda a, c: torch.ormqr(*torch.geqrf(a), c.mT, left=False), [TALL, C]),
    "ormqr_right_transpose": (lambda a, c: torch.ormqr(*torch.geqrf(a), c.mT, left=False,
                                                       transpose=True), [TALL, C]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_qr_family_compiles_to_eagers_numbers(name: str) -> None:
    fn, inputs = CASES[name]
    assert_compiles_to_eager(fn, inputs, rtol=1e-3, atol=1e-4, name=name)
