"""NaN and all -inf inputs through compiled isfinite and max pooling, against eager CPU.

Torch-MLIR folds ``x == x`` to true, so ATen's composite isfinite (``(x == x) * (|x| !=
inf)``) called NaN finite and ``nan_to_num``'s gradient was 1 at NaN. ATen's max pools
take a window's last NaN (its bits and index) and, for an all -inf window, the window's
first element inside the input; max_pool3d and the adaptive max pools reported neither.
Every comparison here is exact (NaN positions and bits included).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401  (registers the backend and device)
from torchneuron.compiler import compile_graph

aten = torch.ops.aten
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _exact(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def _special(dtype: torch.dtype) -> torch.Tensor:
    fi = torch.finfo(dtype)
    vals = [1.0, float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0,
            fi.tiny / 4, -fi.tiny / 4, fi.tiny, fi.max, -fi.max, fi.max / 2, 1e-30, -3.5]
    return torch.tensor(vals, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_isfinite_isnan_isinf_and_self_equality_match_eager(dtype: torch.dtype) -> None:
    x = _special(dtype)

    def fn(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.isfinite(a), torch.isnan(a), torch.isinf(a), a == a, a != a

    got = compile_graph(fn, [x]).run([x])
    for g, w in zip(got, fn(x), strict=True):
        assert torch.equal(g, w)


@pytest.mark.parametrize("dtype", (torch.int32, torch.int64, torch.uint8, torch.bool))
def test_isfinite_of_integers_is_all_true(dtype: torch.dtype) -> None:
    x = torch.tensor([0, 1, 2, 1], dtype=dtype)
    got = compile_graph(torch.isfinite, [x]).run([x])
    assert torch.equal(got[0], torch.isfinite(x))


def test_nan_to_num_gradient_is_zero_at_nan_and_inf() -> None:
    x = torch.tensor([1.0, float("nan"), -float("inf"), float("inf"), 2.0])

    def f(a: torch.Tensor) -> torch.Tensor:
        w = torch.arange(5.0).to(a.device)
        return torch.nan_to_num(a, nan=0.0, neginf=-1.0).mul(w).sum()

    _compiled_grad_is_eagers(f, x)


def _compiled_grad_is_eagers(f: Any, x: torch.Tensor) -> None:
    """The gradient of ``f`` at ``x``, compiled on neuron, equals eager's on CPU exactly."""
    xe = x.clone().requires_grad_()
    f(xe).backward()
    torch._dynamo.reset()
    xc = x.to("neuron").requires_grad_()
    torch.compile(f, backend="neuron")(xc).backward()
    assert xe.grad is not None and xc.grad is not None
    _exact(xc.grad.cpu(), xe.grad)


def _nan_ninf(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    flat = x.view(-1)
    flat[torch.randperm(flat.numel(), generator=g)[: flat.numel() // 16]] = float("nan")
    flat[torch.randperm(flat.numel(), generator=g)[: flat.numel() // 4]] = -float("inf")
    return x


# kernel, stride, padding, dilation, ceil_mode
POOL3D = [(3, 2, 0, 1, False), (2, 1, 1, 1, True), (3, 2, 1, 2, True), ((2, 3, 2), (1, 2, 2), (1, 1, 0), 1, False)]


@pytest.mark.parametrize("kind", ("nan", "ninf"))
@pytest.mark.parametrize("cfg", POOL3D)
def test_max_pool3d_values_indices_and_gradient_match_eager(cfg: tuple, kind: str) -> None:  # noqa: ANN401
    k, s, p, d, ceil = cfg
    shape = (1, 2, 5, 6, 5)
    x = _nan_ninf(shape, 3) if kind == "nan" else torch.full(shape, -float("inf"))
    y0, i0 = F.max_pool3d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)
    g = torch.randn(y0.shape)
    kk, ss = list(k) if isinstance(k, tuple) else [k] * 3, list(s) if isinstance(s, tuple) else [s] * 3
    pp, dd = list(p) if isinstance(p, tuple) else [p] * 3, [d] * 3

    def fn(a: torch.Tensor, ga: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, i = F.max_pool3d(a, k, s, p, d, ceil_mode=ceil, return_indices=True)
        dx = aten.max_pool3d_with_indices_backward(ga, a, kk, ss, pp, dd, ceil, i)
        return y, i, dx

    got = compile_graph(fn, [x, g]).run([x, g])
    for gv, wv in zip(got, fn(x, g), strict=True):
        _exact(gv, wv)


def test_max_pool3d_nan_keeps_its_bits() -> None:
    x = torch.zeros(1, 1, 3, 3, 3)
    x[0, 0, 0, 0, 0] = float("nan")
    x[0, 0, 2, 1, 0] = -float("nan")
    x[0, 0, 1, 1, 1] = 5.0
    fn = lambda a: F.max_pool3d(a, 3, 2, return_indices=True)  # noqa: E731
    got = compile_graph(fn, [x]).run([x])
    want = fn(x)
    assert torch.equal(got[0].view(torch.int32), want[0].view(torch.int32))
    assert torch.equal(got[1], want[1])


@pytest.mark.parametrize("nd,out", [(1, 3), (2, (3, 2)), (3, (2, 3, 2)), (2, 1)])
@pytest.mark.parametrize("kind", ("nan", "ninf"))
def test_adaptive_max_pool_values_indices_and_gradient_match_eager(nd: int, out: object,
                                                                   kind: str) -> None:
    shape = {1: (2, 3, 7), 2: (2, 3, 5, 7), 3: (1, 2, 5, 4, 6)}[nd]
    x = _nan_ninf(shape, 5) if kind == "nan" else torch.full(shape, -float("inf"))
    pool = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}[nd]
    g = torch.randn(pool(x, out).shape)

    def fn(a: torch.Tensor, ga: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, i = pool(a, out, return_indices=True)
        if nd == 1:
            return y, i
        back = getattr(aten, f"adaptive_max_pool{nd}d_backward")
        return y, i, back(ga, a, i)

    got = compile_graph(fn, [x, g]).run([x, g])
    for gv, wv in zip(got, fn(x, g), strict=True):
        _exact(gv, wv)


@pytest.mark.parametrize("dim", (1, 2, 3))
def test_max_pool_trains_through_nan_like_eager(dim: int) -> None:
    shape = {1: (2, 3, 9), 2: (2, 3, 7, 8), 3: (1, 2, 5, 6, 5)}[dim]
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[dim]
    x = _nan_ninf(shape, 7)

    def f(a: torch.Tensor) -> torch.Tensor:
        y = pool(a, 3, 2, 1, 1, ceil_mode=True)
        w = torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape).to(y.device)
        return torch.nan_to_num(y, nan=0.0, neginf=-1.0).mul(w).sum()

    _compiled_grad_is_eagers(f, x)


def test_inputs_hold_nan_windows_and_plain_windows() -> None:
    """The random inputs above give windows with a NaN maximum (some with several NaNs)
    and windows without: the comparisons exercise both paths."""
    x = _nan_ninf((1, 2, 5, 6, 5), 3)
    y = F.max_pool3d(x, 3, 2, 1, 2, ceil_mode=True)
    assert y.isnan().any() and not y.isnan().all()
    windows = x.unfold(2, 3, 2).unfold(3, 3, 2).unfold(4, 3, 2).isnan().sum((-3, -2, -1))
    assert (windows >= 2).any()
    a = F.adaptive_max_pool2d(_nan_ninf((2, 3, 5, 7), 5), (3, 2))
    assert a.isnan().any() and not a.isnan().all()


def test_channels_last_3d_max_pool_is_refused_and_runs_eagerly() -> None:
    """ATen's channels-last max_pool3d reports some all -inf windows' indices without
    their depth term, depending on the CPU's vector width: refused (typed, op named),
    and torch.compile then gives eager's numbers."""
    from torchneuron.compiler.errors import CompileError

    x = torch.full((1, 2, 5, 6, 5), -float("inf")).to(memory_format=torch.channels_last_3d)
    x[0, 0, 1, 2, 3] = float("nan")

    def fn(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.max_pool3d(a, 2, 1, 1, 1, return_indices=True)

    with pytest.raises(CompileError) as info:
        compile_graph(fn, [x])
    assert info.value.op == "aten.max_pool3d_with_indices"
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(x.to("neuron"))
    for g, w in zip(got, fn(x), strict=True):
        _exact(g.cpu(), w)
