"""Our decompositions of convolution, pooling and padding gradients and of adaptive
pooling give ATen's CPU results (float64, so only summation order may differ)."""

from __future__ import annotations

import itertools

import pytest
import torch

from torchneuron.compiler import decomposition_table
from torchneuron.compiler.decomp.conv import convolution_backward
from torchneuron.compiler.decomp.pad import PAD_DECOMPOSITIONS
from torchneuron.compiler.decomp.pool import POOL_DECOMPOSITIONS
from torchneuron.compiler.errors import PrepareError

aten = torch.ops.aten
_TOL = {"rtol": 1e-12, "atol": 1e-12}


def test_tables_are_in_the_compilers_decomposition_table() -> None:
    table = decomposition_table()
    for op in [aten.convolution_backward.default, *POOL_DECOMPOSITIONS, *PAD_DECOMPOSITIONS]:
        assert op in table, op


@pytest.mark.parametrize("nd,transposed,groups", itertools.product([1, 2, 3], [False, True], [1, 2]))
def test_convolution_backward(nd: int, transposed: bool, groups: int) -> None:
    torch.manual_seed(nd)
    for stride, pad, dil in itertools.product([1, 2], [0, 1], [1, 2]):
        x = torch.randn(2, 4, *[7, 6, 5][:nd], dtype=torch.float64)
        k = [3, 2, 3][:nd]
        shape = (4, 6 // groups) if transposed else (6, 4 // groups)
        w = torch.randn(*shape, *k, dtype=torch.float64)
        opad = [min(1, max(stride, dil) - 1)] * nd if transposed else [0] * nd
        args = ([stride] * nd, [pad] * nd, [dil] * nd, transposed, opad, groups)
        y = aten.convolution(x, w, None, *args)
        gy = torch.randn_like(y)
        want = aten.convolution_backward(gy, x, w, [shape[1] if transposed else 6], *args,
                                         [True] * 3)
        got = convolution_backward(gy, x, w, None, *args, [True] * 3)
        for a, b in zip(want, got, strict=True):
            torch.testing.assert_close(b, a, **_TOL)
        # the weight's layout, as ATen's: another one makes AccumulateGrad copy every step
        assert got[1].stride() == want[1].stride()


def test_convolution_backward_of_channels_last_tensors_is_refused() -> None:
    """Eager computes it in that layout, and the lowered gradients differed in the last
    bits: the graph runs eagerly (tests/compiler/test_exact_conv_grad.py)."""
    torch.manual_seed(0)
    x = torch.randn(2, 4, 7, 6).to(memory_format=torch.channels_last)
    w = torch.randn(6, 4, 3, 3).to(memory_format=torch.channels_last)
    args = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    gy = torch.randn_like(aten.convolution(x, w, None, *args))
    with pytest.raises(PrepareError) as info:
        convolution_backward(gy, x, w, None, *args, [True] * 3)
    assert info.value.reason == "conv-channels-last-grad"


@pytest.mark.parametrize("nd", [2, 3])
def test_avg_pool_backward(nd: int) -> None:
    torch.manual_seed(0)
    fwd = aten.avg_pool2d if nd == 2 else aten.avg_pool3d
    bwd = aten.avg_pool2d_backward.default if nd == 2 else aten.avg_pool3d_backward.default
    mine = POOL_DECOMPOSITIONS[bwd]
    for k, s, p, ceil, include, div in itertools.product([2, 3], [1, 2], [0, 1], [False, True],
                                                          [False, True], [None, 3]):
        for lead in ([2, 3], [3]):
            x = torch.randn(*lead, *[7, 6, 5][:nd], dtype=torch.float64)
            args = ([k] * nd, [s] * nd, [p] * nd, ceil, include, div)
            g = torch.randn_like(fwd(x, *args))
            torch.testing.assert_close(mine(g, x, *args), bwd(g, x, *args), **_TOL)


def test_max_pool3d_backward() -> None:
    x = torch.randn(2, 3, 7, 6, 5, dtype=torch.float64)
    args = ([2, 3, 2], [2, 1, 2], [1, 1, 0], [1, 1, 1], True)
    y, idx = aten.max_pool3d_with_indices(x, *args)
    g = torch.randn_like(y)
    op = aten.max_pool3d_with_indices_backward.default
    torch.testing.assert_close(POOL_DECOMPOSITIONS[op](g, x, *args, idx), op(g, x, *args, idx))


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_adaptive_pools(nd: int) -> None:
    torch.manual_seed(nd)
    max_fwd = getattr(aten, f"adaptive_max_pool{nd}d").default
    for outs in ([3, 4, 2], [1, 1, 1], [5, 6, 5], [7, 2, 3]):
        for lead in ([2, 3], [3]):
            x = torch.randn(*lead, *[5, 6, 5][:nd], dtype=torch.float64)
            o = outs[:nd]
            want, got = max_fwd(x, o), POOL_DECOMPOSITIONS[max_fwd](x, o)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
            if nd == 1:
                continue
            g = torch.randn_like(want[0])
            op = getattr(aten, f"adaptive_max_pool{nd}d_backward").default
            torch.testing.assert_close(POOL_DECOMPOSITIONS[op](g, x, want[1]), op(g, x, want[1]))
            avg = getattr(aten, f"_adaptive_avg_pool{nd}d").default
            y = avg(x, o)
            if avg in POOL_DECOMPOSITIONS:
                torch.testing.assert_close(POOL_DECOMPOSITIONS[avg](x, o), y, **_TOL)
            op = getattr(aten, f"_adaptive_avg_pool{nd}d_backward").default
            ga = torch.randn_like(y)
            torch.testing.assert_close(POOL_DECOMPOSITIONS[op](ga, x), op(ga, x), **_TOL)


@pytest.mark.parametrize("nd,pad", [(1, [2, 1]), (2, [1, 2, 0, 3]), (3, [1, 0, 2, 1, 1, 2]),
                                    (2, [-1, 2, 1, 0])])
def test_replication_pad_backward(nd: int, pad: list[int]) -> None:
    fwd = getattr(aten, f"replication_pad{nd}d")
    op = getattr(aten, f"replication_pad{nd}d_backward").default
    for lead in ([2, 3], [3]):
        x = torch.randn(*lead, *[5, 4, 6][:nd], dtype=torch.float64)
        g = torch.randn_like(fwd(x, pad))
        torch.testing.assert_close(PAD_DECOMPOSITIONS[op](g, x, pad), op(g, x, pad), **_TOL)
