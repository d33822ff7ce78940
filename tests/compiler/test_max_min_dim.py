"""``max(dim)`` / ``min(dim)`` compiled give eager's values and indices: a NaN wins with
its first index, ties give the first index, bool inputs reduce as ATen's (the lowering
dropped NaN, so ``[1, nan, 3, nan, -1].max(0)`` came back as ``(-1, 4)``, and bool
``max(1)`` of ``[[True, False], [False, False]]`` as ``[True, True]``). Exact comparisons
against eager CPU, NaN positions included; gradients through both as well."""

from __future__ import annotations

import pytest
import torch

import torchneuron  # noqa: F401  (registers the backend and device)
from torchneuron.compiler import compile_graph

NAN, INF = float("nan"), float("inf")
INPUTS = {
    "nan_1d": torch.tensor([1.0, NAN, 3.0, NAN, -1.0]),
    "nan_2d": torch.tensor([[1.0, NAN, 3.0], [NAN, NAN, NAN], [-INF, -INF, 2.0], [3.0, 1.0, 3.0]]),
    "inf_nan": torch.tensor([[INF, NAN], [-INF, -INF]]),
    "half_nan": torch.tensor([[0.5, NAN, 2.0], [2.0, 2.0, -1.0]], dtype=torch.float16),
    "int_ties": torch.tensor([[2, 7, 7], [1, 1, 0]], dtype=torch.int32),
    "bool": torch.tensor([[True, False], [False, False], [False, True]]),
}


@pytest.mark.parametrize("name", list(INPUTS))
@pytest.mark.parametrize("op", [torch.max, torch.min], ids=["max", "min"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_extreme_over_a_dim_matches_eager(name: str, op: object, keepdim: bool) -> None:
    x = INPUTS[name]
    for dim in range(x.dim()):
        def fn(t: torch.Tensor, d: int = dim) -> tuple[torch.Tensor, torch.Tensor]:
            out = op(t, d, keepdim=keepdim)  # type: ignore[operator]
            return out.values, out.indices

        got = compile_graph(fn, [x]).run([x])
        for g, w in zip(got, fn(x), strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape, (dim, g, w)
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True,
                                       msg=f"dim {dim}: {g} vs eager {w}")


def test_extreme_gradient_matches_eager() -> None:
    x = torch.tensor([[1.0, 5.0, 3.0], [4.0, 4.0, 2.0]])

    def loss(t: torch.Tensor) -> torch.Tensor:
        return t.max(1).values.sum() + 2 * t.min(0).values.sum()

    xn = x.to("neuron").requires_grad_()
    torch.compile(loss, backend="neuron")(xn).backward()
    xc = x.clone().requires_grad_()
    loss(xc).backward()
    assert torch.equal(xn.grad.cpu(), xc.grad)
