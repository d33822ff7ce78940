"""The batch-variance fusion (``interpreter.collapse.norm``): used on the run BatchNorm's
training forward lowers to, the op-by-op interpreter's bits, eager PyTorch's numbers,
and the op-by-op run for every form it does not recognise.

Why: it runs in every compiled BatchNorm training step; a drift would silently change
the normalisation, and the running variance, of every such model.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.compiler.interpreter.test_interpreter_collapse import _runs, _same_bits

aten = torch.ops.aten
FUSED = "torchneuron.collapsed.batch_variance"


def _bn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, rm: torch.Tensor,
        rv: torch.Tensor) -> tuple[torch.Tensor, ...]:  # fmt: skip
    return aten._native_batch_norm_legit_functional(x, w, b, rm, rv, True, 0.1, 1e-5)


def _bn_args(shape: tuple[int, ...], case: str, dtype: torch.dtype = torch.float32) -> list:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    if case == "offset":  # a large mean: the deviations cancel most of each value
        x = x * 1e-3 + 1e4
    elif case == "constant":  # zero variance in every channel
        x = torch.full(shape, 3.25)
    elif case == "signed_zeros":
        x = torch.zeros(shape)
        x.view(-1)[::2] = -0.0
    elif case == "nonfinite":
        x.view(-1)[3] = float("inf")
        x.view(-1)[-1] = float("nan")
    c = shape[1]
    w, b = torch.randn(c, generator=g), torch.randn(c, generator=g)
    rm, rv = torch.randn(c, generator=g), torch.rand(c, generator=g) + 0.5
    return [t.to(dtype) for t in (x, w, b, rm, rv)]


def _exact_var(x: torch.Tensor) -> torch.Tensor:
    """Per-channel biased variance of a (N, C, ...) tensor, exactly summed (fsum)."""
    cols = x.double().transpose(0, 1).reshape(x.shape[1], -1).tolist()
    out = []
    for col in cols:
        m = math.fsum(col) / len(col)
        out.append(math.fsum((v - m) ** 2 for v in col) / len(col))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("case", ["normal", "offset", "constant", "signed_zeros", "nonfinite"])
@pytest.mark.parametrize("shape", [(8, 8, 16, 16), (5, 3, 7, 2), (16, 6)])
def test_batch_norm_forward_variance_is_fused_and_exact(shape, case, monkeypatch) -> None:  # noqa: ANN001
    args = _bn_args(shape, case)
    fast, slow, fused = _runs(_bn, args, monkeypatch)
    assert FUSED in fused
    assert all(_same_bits(a, b) for a, b in zip(fast, slow, strict=True))
    eager = _bn(*[a.clone() for a in args])
    # with a large offset only the variance is compared (below): the program sums the
    # float32 batch mean in float32, eager in float64 (a lowering matter, not this fusion)
    for got, want in zip(fast, eager, strict=True):
        if case != "offset":
            torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-4, atol=1e-4)
    if case != "nonfinite":  # the running variance: unbiased batch variance blended in
        n = args[0].numel() // shape[1]
        ref = (_exact_var(args[0]) * n / (n - 1) * 0.1 + args[4].double() * 0.9).float()
        torch.testing.assert_close(fast[4], ref, rtol=2e-6, atol=1e-7)


def test_module_batch_norm_in_training_is_fused(monkeypatch) -> None:  # noqa: ANN001
    """The form ``nn.BatchNorm2d`` in training mode lowers to, as the CNN loop compiles it."""
    bn = torch.nn.BatchNorm2d(4).train()
    x = torch.randn(3, 4, 5, 5, generator=torch.Generator().manual_seed(2))

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, rm: torch.Tensor,
           rv: torch.Tensor) -> torch.Tensor:  # fmt: skip
        return torch.nn.functional.batch_norm(x, rm.clone(), rv.clone(), w, b, True)

    args = [x, bn.weight.detach(), bn.bias.detach(), bn.running_mean, bn.running_var]
    fast, slow, fused = _runs(fn, args, monkeypatch)
    assert FUSED in fused
    assert _same_bits(fast[0], slow[0])
    torch.testing.assert_close(fast[0], fn(*args))


def test_float64_batch_norm_is_not_fused(monkeypatch) -> None:  # noqa: ANN001
    """No widening convert: another form, run op by op."""
    args = _bn_args((4, 3, 5, 5), "normal", torch.float64)
    fast, slow, fused = _runs(_bn, args, monkeypatch)
    assert FUSED not in fused
    assert all(_same_bits(a, b) for a, b in zip(fast, slow, strict=True))


def test_variance_whose_mean_is_read_elsewhere_is_not_fused(monkeypatch) -> None:  # noqa: ANN001
    """The run's float64 mean is an output too: the run is not closed, so no fusion."""

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wide = x.double()
        m = wide.sum(dim=(0, 2), keepdim=True) / (x.shape[0] * x.shape[2])
        d = wide - m
        v = (d * d).sum(dim=(0, 2), keepdim=True) / (x.shape[0] * x.shape[2])
        return v.float(), m

    x = torch.randn(4, 3, 6)
    fast, slow, fused = _runs(fn, [x], monkeypatch)
    assert FUSED not in fused
    assert all(_same_bits(a, b) for a, b in zip(fast, slow, strict=True))
    torch.testing.assert_close(fast[0], fn(x)[0])


def test_hand_written_variance_of_the_same_form_is_fused_and_exact(monkeypatch) -> None:  # noqa: ANN001
    """The same run written out by hand (other dims, rank 3): fused, same bits."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        wide = x.double()
        m = wide.sum(dim=(0, 2), keepdim=True) / (x.shape[0] * x.shape[2])
        d = wide - m
        return ((d * d).sum(dim=(0, 2), keepdim=True) / (x.shape[0] * x.shape[2])).float()

    x = torch.randn(4, 3, 6) * 100 + 7
    fast, slow, fused = _runs(fn, [x], monkeypatch)
    if FUSED not in fused:
        pytest.skip("this hand-written spelling lowers to another form")
    assert _same_bits(fast[0], slow[0])
    torch.testing.assert_close(fast[0], fn(x))
