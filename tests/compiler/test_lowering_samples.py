"""The ops whose lowering gave numbers unlike eager's, through the whole compiler.

A fast subset of ``tools/lowering_coverage.py`` (every sample of each op here): each
sample either compiles and matches eager, or is refused with a typed error; never a
different number, never a crash at run time.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import lowering_coverage  # noqa: E402

FIXED = ["remainder", "take", "nn.functional.avg_pool3d", "median", "cummax", "var_mean", "std_mean", "std",
         "var", "masked.argmax", "masked.argmin", "nn.functional.scaled_dot_product_attention"]


@pytest.mark.parametrize("name", FIXED)
def test_fixed_op_never_gives_a_wrong_number(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.testing._internal.common_methods_invocations as cmi
    from torch.testing._internal.common_methods_invocations import op_db

    # as the sweep does: OpInfo's reseeding wrapper off, the sweep seeds both runs
    monkeypatch.setattr(cmi, "wrapper_set_seed", lambda f, *a, **k: f(*a, **k))

    (op,) = [o for o in op_db if o.name == name and not o.variant_test_name]
    result = lowering_coverage.run_op(op, 0)
    assert result["status"] in ("pass", "refused"), result
    assert result["samples"].get("pass", 0) > 0, result


def test_remainder_of_negative_operands_is_pythons() -> None:
    from torchneuron.compiler import compile_graph

    a, b = torch.tensor([-5.5, 5.5, -3.0, 7.0]), torch.tensor([2.0, -2.0, 2.0, -3.0])
    exe = compile_graph(lambda x, y: (torch.remainder(x, y), x % 3, 7 % y), [a, b])
    got = exe.run([a, b])
    for g, w in zip(got, (torch.remainder(a, b), a % 3, 7 % b), strict=True):
        torch.testing.assert_close(g, w)


def test_argmax_and_argmin_pick_the_first_nan_like_eager() -> None:
    from torchneuron.compiler import compile_graph

    x = torch.randn(4, 6)
    x[1, 4] = x[1, 2] = x[3, 0] = float("nan")

    def fn(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (t.argmax(), t.argmin(), t.argmax(1), t.argmin(0, keepdim=True),
                t.argmax(keepdim=True), t[0].argmax())

    exe = compile_graph(fn, [x])
    for got, want in zip(exe.run([x]), fn(x), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_variance_over_too_few_elements_is_eagers_nan_or_inf() -> None:
    """N <= correction: eager divides the sum of squares by 0 (NaN where it is 0, inf
    elsewhere; the lowering gave -0.0, so these graphs were refused)."""
    import warnings

    from torchneuron.compiler import compile_graph

    cases = [(torch.randn(1), lambda t: torch.var(t)), (torch.randn(3, 2), lambda t: torch.var(t, 1, correction=2)),
             (torch.randn(0), lambda t: torch.var_mean(t)), (torch.randn(1), lambda t: torch.std_mean(t)),
             (torch.tensor([2.0, 2.0]), lambda t: torch.var(t, correction=2)),
             (torch.randn(3, 2), lambda t: torch.std(t, 1, correction=3, keepdim=True)),
             (torch.randn(4, 3), lambda t: torch.var(t, 0))]  # enough elements: the plain lowering
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager's "degrees of freedom is <= 0"
        for x, fn in cases:
            want = fn(x)
            want = list(want) if isinstance(want, tuple) else [want]
            for got, w in zip(compile_graph(fn, [x]).run([x]), want, strict=True):
                torch.testing.assert_close(got, w, equal_nan=True)


def test_negative_index_wraps_like_eager() -> None:
    from torchneuron.compiler import compile_graph

    x, i = torch.randn(9), torch.tensor([-1, -9, 3])
    exe = compile_graph(lambda t, j: t[j], [x, i])
    torch.testing.assert_close(exe.run([x, i])[0], x[i])


def test_slice_scatter_with_open_end_compiles_like_eager() -> None:
    """``x[..., 8:]``'s backward is a slice_scatter with end 2**63 - 1 (the Llama rotary
    embedding's backward); Torch-MLIR failed on the unclamped end."""
    from torchneuron.compiler import compile_graph

    x, src = torch.randn(2, 3, 16), torch.randn(2, 3, 8)

    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.ops.aten.slice_scatter(a, b, 2, 8, 2**63 - 1),
                torch.ops.aten.slice_scatter(a, b, -1, -8, None))

    exe = compile_graph(fn, [x, src])
    for got, want in zip(exe.run([x, src]), fn(x, src), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_broadcasting_and_0d_operands_compile_like_eager() -> None:
    """Shapes the lowering refused before decomp_shapes (found by the sweep): a first
    operand that broadcasts against the others, 0-d scans and reductions, a Python-scalar
    copysign, 0-d softmax (hung Torch-MLIR) and vector_norm. One graph, so one compile;
    refusing any of them fails the test."""
    from torchneuron.compiler import compile_graph

    x, row, s = torch.randn(5, 1), torch.randn(5), torch.randn(())
    mask = torch.rand(5, 5) > 0.5

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, m: torch.Tensor) -> Any:
        # (clamp by tensor bounds is refused for floats: test_exact_relu)
        return (torch.clamp_min(a.long(), b.long()), torch.clamp_max(a.long(), b.long()),
                torch.clamp(a.long(), b.long(), b.long() + 1),
                torch.fmin(b, c), torch.fmax(a, b),
                b.masked_scatter(m, torch.arange(25.0).reshape(5, 5)),
                torch.cumsum(c, 0), torch.max(c, 0), torch.min(c, 0, keepdim=True),
                torch.kthvalue(c, 1), torch.copysign(b, -3.14),
                torch.softmax(c, 0), torch.log_softmax(c, 0), torch.linalg.vector_norm(c, 2, 0))

    want = fn(x, row, s, mask)
    got = compile_graph(fn, [x, row, s, mask]).run([x, row, s, mask])
    flat_want = [t for w in want for t in (w if isinstance(w, tuple) else (w,))]
    assert len(got) == len(flat_want)
    for g, w in zip(got, flat_want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_empty_results_compile_like_eager() -> None:
    """Zero-size results (found by the sweep): ``diff`` with ``n`` past the size, a
    zero-batch ``cholesky_solve``, ``cdist`` of an empty set with the inf norm. Their
    slices and selects on zero-size dims failed to lower; an empty result holds no values,
    so prepare folds it to ``full``."""
    from torchneuron.compiler import compile_graph

    x, batch, pts = torch.randn(3, 3, 3), torch.zeros(0, 2, 2), torch.randn(4, 5)
    empty = torch.zeros(0, 5)

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, e: torch.Tensor) -> Any:
        return (torch.diff(a, 6, 1), torch.cholesky_solve(b, b),
                torch.cdist(e, c, p=float("inf")), a.sum())

    want = fn(x, batch, pts, empty)
    got = compile_graph(fn, [x, batch, pts, empty]).run([x, batch, pts, empty])
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_conv_transpose_with_uneven_output_padding_compiles_like_eager() -> None:
    """Torch-MLIR applied output_padding (2, 3) to the wrong dims (23x21 for 22x22)."""
    from torchneuron.compiler import compile_graph

    x, w, b = torch.randn(2, 2, 4, 4), torch.randn(2, 2, 4, 5), torch.randn(4)

    def fn(a: torch.Tensor, k: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv_transpose2d(a, k, c, stride=(3, 2), padding=(1, 2),
                                                    output_padding=(2, 3), groups=2,
                                                    dilation=(4, 4))

    got = compile_graph(fn, [x, w, b]).run([x, w, b])[0]
    torch.testing.assert_close(got, fn(x, w, b))


def test_any_all_of_uint8_and_over_several_dims_are_eagers() -> None:
    """any of uint8 gave the largest element (any([0, 3]) was 3; ATen gives 1), and
    any / all over several dims had no lowering; an empty dim list is elementwise."""
    from torchneuron.compiler import compile_graph

    aten = torch.ops.aten
    u = torch.tensor([[0, 3, 2], [0, 0, 0]], dtype=torch.uint8)
    fns = [lambda t: aten.any.dim(t, 1), lambda t: aten.any.default(t),
           lambda t: aten.all.default(t + 1), lambda t: aten.any.dims(t, [0, 1], True),
           lambda t: aten.all.dims(t, None), lambda t: aten.any.dims(t, []),
           lambda t: t.bool().all(dim=(0, 1))]
    for fn in fns:
        got, want = compile_graph(fn, [u]).run([u])[0], fn(u)
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


def test_avg_pool3d_ceil_mode_window_past_the_end_is_eagers() -> None:
    """A ceil-mode window that adds an output: the lowering failed (reduce_window type
    mismatch); window sums over the count eager uses (padding only if counted, overhang
    never)."""
    from torchneuron.compiler import compile_graph

    x = torch.randn(2, 1, 6, 5, 6)
    for include in (True, False):
        def fn(t: torch.Tensor, inc: bool = include) -> torch.Tensor:
            return torch.nn.functional.avg_pool3d(t, (4, 5, 6), stride=(2, 3, 2), padding=2,
                                                  ceil_mode=True, count_include_pad=inc)

        torch.testing.assert_close(compile_graph(fn, [x]).run([x])[0], fn(x))
