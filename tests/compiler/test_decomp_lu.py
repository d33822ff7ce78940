"""LU with partial pivoting and what ATen builds on it (compiler/decomp_lu.py), compiled
through the worker, against eager CPU: values to float32 rounding, pivots and info
exactly. Each of these was refused before (no lowering for any LAPACK call)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

from torchneuron.compiler import CompileError, compile_graph

_g = torch.Generator().manual_seed(0)
A = torch.randn(3, 4, 4, generator=_g)
B = torch.randn(3, 4, 2, generator=_g)
R = torch.randn(2, 5, 3, generator=_g)
S = A.clone()
S[0, :, 1] = 0  # a zero pivot column: info = 2, det 0


def _factor(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lu, piv, _ = torch.linalg.lu_factor_ex(a)
    return lu, piv


CASES: dict[str, tuple[Callable[..., Any], list[torch.Tensor]]] = {
    "det": (torch.linalg.det, [A]),
    "det_singular": (torch.linalg.det, [S]),
    "det_empty": (torch.linalg.det, [torch.randn(2, 0, 0)]),
    "slogdet": (torch.linalg.slogdet, [A]),
    "logdet": (torch.logdet, [A @ A.mT + torch.eye(4)]),
    "_linalg_det": (torch.ops.aten._linalg_det.default, [A]),
    "_linalg_slogdet": (torch.ops.aten._linalg_slogdet.default, [A]),
    "inv_ex": (torch.linalg.inv_ex, [A]),
    "solve_ex": (torch.linalg.solve_ex, [A, B]),
    "solve_ex_vector": (torch.linalg.solve_ex, [A, B[..., 0]]),
    "solve_ex_right": (lambda a, b: torch.linalg.solve_ex(a, b.mT, left=False), [A, B]),
    "solve_ex_column_major": (lambda a, b: torch.linalg.solve_ex(a.mT, b), [A, B]),
    "_linalg_solve_ex": (torch.ops.aten._linalg_solve_ex.default, [A, B]),
    "lu_factor_ex": (torch.linalg.lu_factor_ex, [A]),
    "lu_factor_ex_wide": (torch.linalg.lu_factor_ex, [R.mT.contiguous()]),
    "lu_factor_ex_tall": (torch.linalg.lu_factor_ex, [R]),
    "lu_factor_ex_singular": (torch.linalg.lu_factor_ex, [S]),
    "lu": (torch.linalg.lu, [R]),
    "lu_solve": (lambda a, b: torch.linalg.lu_solve(*_factor(a), b), [A, B]),
    "lu_solve_adjoint": (lambda a, b: torch.linalg.lu_solve(*_factor(a), b, adjoint=True), [A, B]),
    "lu_solve_right": (lambda a, b: torch.linalg.lu_solve(*_factor(a), b.mT, left=False), [A, B]),
    "lu_unpack": (lambda a: torch.lu_unpack(*_factor(a)), [R]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lu_family_compiles_to_eagers_numbers(name: str) -> None:
    fn, inputs = CASES[name]
    got = compile_graph(fn, inputs, name=name).run(inputs)
    want = pytree.tree_leaves(fn(*inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        if w.is_floating_point():
            torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-4, equal_nan=True)
        else:
            assert torch.equal(g, w)  # pivots, info


@pytest.mark.parametrize("fn", [torch.linalg.inv, lambda a: torch.linalg.solve(a, B)])
def test_calls_that_raise_on_a_singular_matrix_are_refused(fn: Callable[..., Any]) -> None:
    """Eager raises for a singular input (``_linalg_check_errors`` on info); a compiled
    graph cannot, so these stay eager."""
    with pytest.raises(CompileError, match="_linalg_check_errors"):
        compile_graph(fn, [A])
