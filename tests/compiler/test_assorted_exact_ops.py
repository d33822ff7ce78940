"""Known wrong numbers of the compiler, now eager's bits or refused (issue 22): float16 /
bfloat16 last-dim ``log_softmax``, ``F.embedding(max_norm=)``, int64 convolution past
2**53, and ``native_layer_norm`` over one element (refused, now eager's kernel). Each
test fails on the code before.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.exact import INF, NAN, bits_equal, matches_eager, torch_compile_matches_eager
from torchneuron.compiler import CompileError, compile_graph

aten = torch.ops.aten


def _rows(dtype: torch.dtype, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(6, n, generator=g) * 10).to(dtype)
    x[0, 0], x[1, -1], x[2, :] = INF, NAN, -INF
    return x


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [7, 300])
def test_half_log_softmax_last_dim_gives_eagers_bits(dtype: torch.dtype, n: int) -> None:
    """Eager rounds the row's sum of exponentials, and its log, to the input's dtype."""
    x = _rows(dtype, n)
    matches_eager(lambda t: F.log_softmax(t, dim=-1), x)
    matches_eager(lambda t: F.log_softmax(t.t(), dim=0), x)  # another dim: float32 kernel


def test_half_log_softmax_under_torch_compile() -> None:
    torch_compile_matches_eager(lambda t: F.log_softmax(t * 2, dim=-1), _rows(torch.float16, 9))


def test_float16_embedding_max_norm_gives_eagers_bits() -> None:
    """A norm past float16's range scaled the row to zeros; eager gives [0.9995, 7.6e-06]."""
    w = torch.tensor([[3e4, 0.23], [1.0, 2.0], [0.1, 0.2]], dtype=torch.float16)
    i = torch.tensor([0, 1, 0])
    torch._dynamo.reset()
    wc, wd = w.clone(), w.to("neuron")
    want = F.embedding(i, wc, max_norm=1.0)
    got = torch.compile(lambda a, b: F.embedding(a, b, max_norm=1.0), backend="neuron")(
        i.to("neuron"), wd)
    bits_equal(got.cpu(), want)
    bits_equal(wd.cpu(), wc)  # the renormed rows written back
    with pytest.raises(CompileError) as info:
        compile_graph(lambda a, b: aten.embedding_renorm(b, a, 1.0, 2.0), [i, w])
    assert info.value.reason == "embedding-renorm-float16"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_embedding_max_norm_gives_eagers_bits(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(10, 4, generator=g) * 100).to(dtype)
    i = torch.randint(0, 10, (12,), generator=g)
    for p in (1.0, 3.0):
        matches_eager(lambda a, b, p=p: aten.embedding_renorm(b, a, 1.5, p), i, w)


@pytest.mark.parametrize("conv", ["1d", "2d-groups", "transposed"])
def test_int64_convolution_past_2_53_is_exact(conv: str) -> None:
    g = torch.Generator().manual_seed(0)

    def big(*shape: int) -> torch.Tensor:
        return torch.randint(-2**62, 2**62, shape, generator=g)

    def small(*shape: int) -> torch.Tensor:
        return torch.randint(-5, 6, shape, generator=g)

    if conv == "1d":
        matches_eager(lambda a, b: F.conv1d(a, b, stride=2, padding=2, dilation=2),
                      big(2, 3, 11), small(4, 3, 3))
        matches_eager(F.conv1d, big(1, 2, 6), big(3, 2, 2))  # products wrap as eager's
    elif conv == "2d-groups":
        matches_eager(lambda a, b: F.conv2d(a, b, groups=2, padding=1, stride=(1, 2)),
                      big(1, 4, 5, 6), small(6, 2, 2, 3))
    else:
        matches_eager(lambda a, b: F.conv_transpose1d(a, b, stride=2, padding=1),
                      big(1, 2, 5), small(2, 3, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_layer_norm_over_one_element_gives_eagers_bits(dtype: torch.dtype) -> None:
    """Eager's mean of a row [inf] is NaN (the lowering gave inf) and its float16 output
    over one element differs between CPU code paths: it was refused, and is now eager's
    own kernel inside the program (decomp/eager_kernels)."""
    x = torch.tensor([[INF], [1.0], [-INF], [NAN], [65504.0]], dtype=dtype)
    matches_eager(lambda t: aten.native_layer_norm(t, [1], None, None, 1e-5), x)
    torch_compile_matches_eager(lambda t: F.layer_norm(t, [1]) + 1, x)


def test_scatter_with_duplicates_keeps_eagers_last_write() -> None:
    """Eager's scatter keeps the last index along ``dim`` for duplicate positions; the
    interpreter's ``index_put_`` wrote duplicates in thread order from 32768 updates on."""
    g = torch.Generator().manual_seed(0)
    rows, cols = 200, 200
    src = torch.randn(cols, rows, generator=g)
    idx = torch.randint(0, 3, (rows, cols), generator=g)
    matches_eager(lambda s, i, u: s.scatter(1, i, u.t()), torch.zeros(rows, cols), idx, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_area_resize_3d_keeps_nan_in_its_windows(dtype: torch.dtype) -> None:
    """``interpolate(mode="area")`` of a 5-D input (adaptive_avg_pool3d): an averaging
    matmul spread each NaN into every output of its row; half precision was an ulp off
    (eager sums and divides in the input's dtype). float32 sums within tolerance."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 7, generator=g).to(dtype)
    x.view(-1)[::13] = NAN
    fn = lambda t: F.interpolate(t, size=(2, 3, 4), mode="area")  # noqa: E731
    (got,) = compile_graph(fn, [x]).run([x])
    want = fn(x)
    if dtype == torch.float32:
        assert torch.equal(got.isnan(), want.isnan())
        torch.testing.assert_close(got, want, equal_nan=True)
    else:
        bits_equal(got, want)


def _nll_case() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(5))
    x[1, 2] = NAN
    return x, torch.tensor([0, 2, -100, 3])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_of_a_nan_row_has_eagers_nan_bits(reduction: str) -> None:
    """Eager scales each picked log-probability by the negated weight, which keeps a
    NaN's sign; the lowered negation flipped it (-NaN where eager gives +NaN).
    ``nll_loss_forward`` is eager's kernel now (decomp/eager_kernels)."""
    x, y = _nll_case()

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(a, b, reduction=reduction)

    want = fn(x, y)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(x.to("neuron"), y.to("neuron")).cpu()
    assert torch.equal(got.view(torch.int32), want.view(torch.int32)), (got, want)


def test_cross_entropy_target_out_of_range_raises_eagers_error() -> None:
    """Eager's kernel raising inside the program reaches the user as eager's error."""
    x, _ = _nll_case()
    y = torch.tensor([0, 7, 1, 3])
    with pytest.raises(IndexError) as want:
        F.cross_entropy(x, y)
    torch._dynamo.reset()
    with pytest.raises(IndexError) as got:
        torch.compile(F.cross_entropy, backend="neuron")(x.to("neuron"), y.to("neuron"))
    assert str(got.value) == str(want.value)


def test_cross_entropy_over_pixels_gives_eagers_bits() -> None:
    """A segmentation loss (``nll_loss2d_forward``, eager's kernel) and its gradient."""
    g = torch.Generator().manual_seed(6)
    x, y = torch.randn(2, 3, 4, 5, generator=g), torch.randint(0, 3, (2, 4, 5), generator=g)
    y[0, 1, 2] = -100
    torch_compile_matches_eager(lambda a, b: F.cross_entropy(a, b), x, y, grad=True)
