"""``F.interpolate`` under torch.compile: eager's NaN and inf in linear resizes, and
float16 / bfloat16 linear and bicubic resizes refused (run eagerly, eager's bits).

Before: PyTorch's decomposition interpolated as ``t0 + (t1 - t0) * w``, so an infinity
next to a finite value gave NaN and inf in other places than eager's ``t0 * w0 + t1 *
w1`` (a (1, 1, 2, 4) input with inf and -inf, ``align_corners=True``); half-precision
resizes were 1-4 ulps off, and eager's own half-precision bits differ between CPU code
paths: they were refused, and are eager's own kernel now (decomp/eager_kernels).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401
from tests.compiler.exact import INF, NAN, bits_equal
from torchneuron.compiler import compile_graph, stats


def _special_2x4() -> torch.Tensor:
    return torch.tensor([[[[1.0, INF, -INF, 2.0], [3.0, 4.0, INF, 5.0]]]])


def _same_specials(got: torch.Tensor, want: torch.Tensor) -> None:
    """NaN and +-inf exactly where eager has them; finite values within float tolerance
    (eager's float32 bits differ between its CPU code paths)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got.isnan(), want.isnan()), (got, want)
    assert torch.equal(got == INF, want == INF) and torch.equal(got == -INF, want == -INF), \
        (got, want)
    fin = want.isfinite()
    torch.testing.assert_close(got[fin], want[fin])


CASES = [
    ("bilinear", dict(size=(3, 7), align_corners=True)),
    ("bilinear", dict(scale_factor=2, align_corners=False)),
    ("bilinear", dict(size=(2, 4), align_corners=False)),  # same size: eager still weights
]


@pytest.mark.parametrize("mode,kw", CASES)
def test_bilinear_specials_under_torch_compile(mode: str, kw: dict) -> None:
    x = _special_2x4()
    fn = lambda t: F.interpolate(t, mode=mode, **kw)  # noqa: E731
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(x.to("neuron")).cpu()
    _same_specials(got, fn(x))


@pytest.mark.parametrize("align_corners", [True, False])
def test_linear_and_trilinear_specials(align_corners: bool) -> None:
    x1 = torch.tensor([[[1.0, INF, -INF, 2.0, NAN, 3.0, -INF]]])
    fn1 = lambda t: F.interpolate(t, size=11, mode="linear", align_corners=align_corners)  # noqa: E731
    (got,) = compile_graph(fn1, [x1]).run([x1])
    _same_specials(got, fn1(x1))
    x3 = torch.arange(24.0).reshape(1, 1, 2, 3, 4)
    x3.view(-1)[[1, 9, 14]] = torch.tensor([INF, -INF, NAN])
    fn3 = lambda t: F.interpolate(t, size=(3, 5, 6), mode="trilinear",  # noqa: E731
                                  align_corners=align_corners)
    (got,) = compile_graph(fn3, [x3]).run([x3])
    _same_specials(got, fn3(x3))


def test_bilinear_gradient_still_compiles() -> None:
    x = torch.randn(2, 3, 5, 6)
    fn = lambda t: F.interpolate(t, size=(7, 9), mode="bilinear")  # noqa: E731
    torch._dynamo.reset()
    before = stats()["failures"]
    xc, xd = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    fn(xc).square().sum().backward()
    torch.compile(fn, backend="neuron")(xd).square().sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)
    assert stats()["failures"] == before  # forward and backward compiled


@pytest.mark.parametrize("dtype,mode", [(torch.float16, "bilinear"), (torch.bfloat16, "bicubic")])
def test_half_resize_gives_eagers_bits(dtype: torch.dtype, mode: str) -> None:
    """Eager's own kernel inside the program, forward and backward (it was refused)."""
    g = torch.Generator().manual_seed(0)
    nd = {"linear": 1, "bilinear": 2, "trilinear": 3, "bicubic": 2}[mode]
    x = torch.randn(2, 3, *[5] * nd, generator=g).to(dtype)
    fn = lambda t: F.interpolate(t, size=[7] * nd, mode=mode) * 2  # noqa: E731
    [got] = compile_graph(fn, [x]).run([x])
    bits_equal(got, fn(x))
    torch._dynamo.reset()
    xd = x.to("neuron").requires_grad_()
    got = torch.compile(fn, backend="neuron")(xd)
    bits_equal(got.detach().cpu(), fn(x))
    got.float().sum().backward()  # (the backward is eager's kernel too)
    xc = x.clone().requires_grad_()
    fn(xc).float().sum().backward()
    bits_equal(xd.grad.cpu(), xc.grad)
