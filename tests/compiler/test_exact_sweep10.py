"""Fixes from the exact all-samples lowering sweep of session 10
(``tools/lowering_coverage.py --exact``, every OpInfo sample in float32): compiled
results equal eager's bits.

Determinants are LAPACK's LU and the product of its diagonal: decomp/lu's unrolled LU
is not LAPACK's order, and OpInfo's ``linalg.det`` of a [3, 5, 5] batch was off in the
last bit (slogdet and logdet of 5x5 to 12x12 matrices alike); they are eager's kernels
in the program now (decomp/eager_kernels.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

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


def test_half_linear_cross_entropy_of_a_1d_input_is_eagers_bits() -> None:
    """``F.linear_cross_entropy`` calls ``F.linear``, which the trace's mode for eager's
    composites did not see (off while the call it passes on runs): a float16 1-d input
    took functorch's product-then-bias (OpInfo's sample 105: 20.906 where eager gives
    20.938, a MISMATCH of the float16 sweep)."""
    h = torch.float16
    x = torch.tensor([-0.0484, -1.3027, 1.2959], dtype=h)
    w = torch.tensor([[-0.6230, 1.0625, 0.5811], [-1.9854, -1.8389, -1.9492],
                      [1.7949, 1.8242, 0.6841], [-0.8311, 0.6577, -1.5107]], dtype=h)
    b = torch.tensor([-0.0430, -0.7974, 8.6406, -6.2930], dtype=h)
    cw = torch.tensor([1.3721, 1.1475, 1.7637, 1.2969], dtype=h)
    xs = torch.randn(5, 3, generator=_g).to(h)
    ts = torch.tensor([3, 0, 1, 3, 2])
    cases_match_eager({
        "1d": lambda x, w, b, cw, xs, ts: F.linear_cross_entropy(
            x, w, torch.tensor(3), linear_bias=b, weight=cw, reduction="sum"),
        "2d": lambda x, w, b, cw, xs, ts: F.linear_cross_entropy(
            xs, w, ts, linear_bias=b, label_smoothing=0.1, reduction="none"),
    }, x, w, b, cw, xs, ts)


def test_chunked_linear_cross_entropy_of_probabilities_is_eagers_bits() -> None:
    """With ``options`` but class probabilities, ``F.linear_cross_entropy`` takes its
    reference path, whose ``F.linear`` the mode must see too (bfloat16 1-d inputs: the
    sweep's ``.chunked`` and ``.chunked_none`` were LAST-BIT, 39.0 for eager's 39.25)."""
    g = torch.Generator().manual_seed(3)
    b16 = torch.bfloat16
    x, w = torch.randn(8, generator=g).to(b16), torch.randn(8, 8, generator=g).to(b16)
    bias, cw = (torch.randn(8, generator=g) * 5).to(b16), torch.rand(8, generator=g).to(b16)
    probs = torch.rand(8, generator=g).softmax(0).to(b16)
    opts = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=2)
    cases_match_eager({r: lambda x, w, p, b, cw, r=r: F.linear_cross_entropy(
        x, w, p, linear_bias=b, weight=cw, reduction=r, options=opts)
        for r in ("sum", "none")}, x, w, probs, bias, cw)
