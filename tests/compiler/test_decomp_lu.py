"""LU with partial pivoting and what ATen builds on it (compiler/decomp_lu.py), compiled
through the worker, against eager CPU: values to float32 rounding, pivots and info
exactly. Each of these was refused before (no lowering for any LAPACK call)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

from tests.compiler.compiled import assert_compiles_to_eager
from torchneuron.compiler import compile_graph

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
    assert_compiles_to_eager(fn, inputs, rtol=1e-3, atol=1e-4, equal_nan=True, name=name)


_N = A @ A.mT + torch.eye(4)
_N[1, 2, 2] = -5.0  # batch 1 is not positive definite at column 3


RAISING: dict[str, tuple[Callable[..., Any], list[torch.Tensor]]] = {
    "inv": (torch.linalg.inv, [S]),
    "solve": (lambda a: torch.linalg.solve(a, B), [S]),
    "lu_factor": (torch.linalg.lu_factor, [S]),
    "linalg.cholesky": (torch.linalg.cholesky, [_N]),
    "cholesky": (torch.cholesky, [_N]),
}


@pytest.mark.parametrize("name", sorted(RAISING))
def test_a_failed_factorization_raises_eagers_error(name: str) -> None:
    """Eager raises on a singular / non-PD input (``_linalg_check_errors`` on info): the
    check is lifted out of the graph and run after the executable, same error, same text;
    a good input gives eager's numbers."""
    fn, inputs = RAISING[name]
    with pytest.raises(Exception) as eager:  # noqa: PT011 - the type is eager's, whatever it is
        fn(*inputs)
    exe = compile_graph(fn, inputs, name=name)
    with pytest.raises(type(eager.value)) as compiled:
        exe.run(inputs)
    assert str(compiled.value) == str(eager.value)
    good = [A @ A.mT + torch.eye(4)] + inputs[1:]
    for g, w in zip(compile_graph(fn, good).run(good), pytree.tree_leaves(fn(*good)), strict=True):
        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_ex_of_a_non_pd_matrix_is_lapacks_partial_result(upper: bool) -> None:
    """potf2 stops at the first non-positive pivot: info names it, the pivot value is
    stored, later columns keep the input (the sweep found NaNs and info 0 here)."""
    nan = torch.full((1, 3, 3), float("nan"))
    x = torch.cat([_N, _N[:1]])
    for inp in (x, nan):
        fn = (lambda a: torch.linalg.cholesky_ex(a, upper=True)) if upper else torch.linalg.cholesky_ex
        got = compile_graph(fn, [inp]).run([inp])
        want = fn(inp)
        torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5, equal_nan=True)
        assert torch.equal(got[1], want[1])
