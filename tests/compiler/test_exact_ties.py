"""Ties in sorting and selection ops: compiled indices equal eager's.

Eager's ``topk``, ``kthvalue``, ``median`` / ``mode`` along a dim and unstable ``sort`` /
``argsort`` order (or pick among) equal values by
their algorithm (rows of 40 values in 0..3: tied indices neither ascending nor alike
between the ops; -0.0 and 0.0 in the algorithm's order), which no lowering reproduces:
the program calls eager's own kernel for them (``decomp/eager_kernels``; they were
refused and ran eagerly before, so a top-k sampling loop ran ``topk`` between regions).
Stable sorts, ``max`` / ``min`` with a dimension and ``argmax`` / ``argmin`` (the first
index of the extreme) are lowered and match.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.compiler.exact import INF, NAN, cases_match_eager, torch_compile_matches_eager
from torchneuron.compiler import compile_graph

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32, torch.uint8, torch.int8)


def _rows(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 4, (6, 40), generator=g).to(dtype)
    if dtype.is_floating_point:
        x[0, ::3] = -0.0
        x[1, 5], x[1, 17] = NAN, NAN
        x[2, :] = 1.0
        x[3, ::2] = INF
        x[4, 7] = -INF
        x[5, ::5], x[5, 1::5] = 0.0, -0.0
    return x


EAGER_ORDER: dict[str, Callable[[torch.Tensor], Any]] = {
    "topk": lambda a: torch.topk(a, 3, 1),
    "topk_smallest": lambda a: torch.topk(a, 3, 1, largest=False),
    "topk_all": lambda a: torch.topk(a, 40, 1),
    "kthvalue": lambda a: torch.kthvalue(a, 5, 1),
    "sort": lambda a: torch.sort(a, 1),
    "sort_descending": lambda a: torch.sort(a, 1, descending=True),
    "argsort": lambda a: torch.argsort(a, 1),
    "msort": torch.msort,
    # the index among tied middle values: eager's selection (lowered as a sort, the
    # index was the sort's tie order, not the median's)
    "median_dim": lambda a: torch.median(a, 1),
    "nanmedian_dim": lambda a: torch.nanmedian(a, 1),
    "mode": lambda a: torch.mode(a, 1),
}
EXACT: dict[str, Callable[[torch.Tensor], Any]] = {
    "sort_stable": lambda a: torch.sort(a, dim=1, stable=True),
    "sort_stable_descending": lambda a: torch.sort(a, dim=1, descending=True, stable=True),
    "argsort_stable": lambda a: torch.argsort(a, dim=1, stable=True),
    "max_dim": lambda a: torch.max(a, 1),
    "min_dim": lambda a: torch.min(a, 1),
    "argmax": lambda a: torch.argmax(a, 1),
    "argmin": lambda a: torch.argmin(a, 1),
}


@pytest.mark.same_on_every_cpu  # (eager's kernel on both sides: equal on any CPU path)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tie_ordering_ops_compile_as_eagers_kernel_and_match(dtype: torch.dtype) -> None:
    cases_match_eager(EAGER_ORDER, _rows(dtype))  # every case in one graph, not refused


@pytest.mark.parametrize("case", ["topk", "sort_descending"])
def test_torch_compile_tie_ordering_ops_match_eager(case: str) -> None:
    torch_compile_matches_eager(EAGER_ORDER[case], _rows(torch.float32))
    torch_compile_matches_eager(lambda a: EAGER_ORDER[case](a * 2)[0].sum(1),
                                _rows(torch.float32), grad=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_stable_sorts_and_extremes_with_ties_match_eager(dtype: torch.dtype) -> None:
    cases_match_eager(EXACT, _rows(dtype))  # every case in one graph


def test_torch_compile_stable_sort_compiles_and_matches_eager() -> None:
    x = _rows(torch.float32)
    torch_compile_matches_eager(lambda a: torch.sort(a, dim=1, stable=True), x)
    torch_compile_matches_eager(lambda a: torch.sort(a * 2, dim=1, stable=True).values.sum(1), x,
                                grad=True)
    compile_graph(lambda a: torch.sort(a, dim=1, stable=True), [x])  # not refused


@pytest.mark.parametrize("op", ["median", "nanmedian"])
def test_median_along_a_dim_without_eagers_kernel_refuses_ties(op: str) -> None:
    """Where eager's kernel does not apply, what is left for ``median`` along a dim is a
    refusal (a sort and a gather picked another index among tied middles), and a dim of
    one value is that value at index 0, as eager gives."""
    from torchneuron.compiler.decomp.refusals.tie_order import TIE_ORDER_DECOMPOSITIONS
    from torchneuron.compiler.errors import PrepareError

    overload = getattr(torch.ops.aten, op).dim
    entry = TIE_ORDER_DECOMPOSITIONS[overload]
    with pytest.raises(PrepareError, match="tie"):
        entry(_rows(torch.float32), 1)
    x = _rows(torch.float32)[:, :1]
    for keepdim in (False, True):
        got, want = entry(x, 1, keepdim), overload(x, 1, keepdim)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    got, want = entry(x[0, 0], 0), overload(x[0, 0], 0)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
