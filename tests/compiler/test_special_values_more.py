"""Compiled ``pow`` and activations on special values and in half precision, against eager CPU.

``pow(x, 0.5)`` is ``sqrt`` in eager (NaN at -inf, -0.0 kept), not C ``pow``; erf-``gelu``
of float32 and narrower is NaN at +inf in eager; float16 / bfloat16 ``elu``, ``selu``,
``celu``, ``gelu`` and ``log_softmax`` are computed in float32 and rounded once (the
lowering rounded every step: tanh-``gelu`` at -3.5 was off by 39%). Special-value cases are
compared exactly (NaN positions, zero signs); half-precision curves with the dtype's
default ``assert_close`` tolerance (the float32 erf is not eager's to the last bit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401  (registers the backend and device)
from tests.compiler.exact import cases_match_eager
from torchneuron.compiler import CompileError, compile_graph

NAN, INF = float("nan"), float("inf")
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
HALVES = (torch.float16, torch.bfloat16)
# zeros of both signs, infinities, NaN, negative bases (integer and fractional), positives
_SPECIAL = [0.0, -0.0, INF, -INF, NAN, -2.0, -0.5, -3.0, -1.0, 0.5, 1.0, 2.0, 7.0]


def _bits_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.is_floating_point():
        assert torch.equal(got.isnan(), want.isnan()), (got, want)
        keep = ~want.isnan()
        assert torch.equal(got[keep], want[keep]), (got, want)
        assert torch.equal(got[keep].signbit(), want[keep].signbit()), (got, want)
    else:
        assert torch.equal(got, want)


def _compiled(fn: Callable[..., Any], *xs: torch.Tensor) -> list[torch.Tensor]:
    return compile_graph(fn, list(xs)).run(list(xs))


def _exact(fn: Callable[..., Any], *xs: torch.Tensor) -> None:
    (got,) = _compiled(fn, *xs)
    _bits_equal(got, fn(*[x.clone() for x in xs]))


def _special(dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(_SPECIAL, dtype=torch.float64).to(dtype)


_EXPONENTS = (0.5, -0.5, 2.0, 3.0, -1.0, -2.0, 0.0, 1.0 / 3, -1.5, INF, -INF, NAN)


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow_by_a_scalar_on_special_bases_matches_eager(dtype: torch.dtype) -> None:
    """Every exponent in one graph per dtype (one compile, not twelve), each against
    eager's bits by name; bfloat16 ``** -0.5`` alone, refused (see test_exact_pow)."""
    if dtype == torch.bfloat16:
        with pytest.raises(CompileError):
            _compiled(lambda a: a ** -0.5, _special(dtype))
    cases = {f"** {e}": (lambda a, e=e: a ** e) for e in _EXPONENTS
             if not (dtype == torch.bfloat16 and e == -0.5)}
    cases_match_eager(cases, _special(dtype))


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
def test_pow_of_every_special_base_by_every_special_tensor_exponent_matches_eager(
        dtype: torch.dtype) -> None:
    s = _special(dtype)
    base, exponent = s.repeat_interleave(len(s)), s.repeat(len(s))
    _exact(torch.pow, base, exponent)
    _exact(lambda a: torch.pow(a, torch.tensor(0.5, dtype=dtype)), s)  # 0-d tensor: C pow


@pytest.mark.parametrize("base", (0.0, -0.0, 2.0, -2.0, INF, -INF, NAN, 0.5))
def test_pow_of_a_special_scalar_base_matches_eager(base: float) -> None:
    _exact(lambda a: torch.pow(base, a), _special(torch.float32))


@pytest.mark.same_on_every_cpu
def test_integer_pow_matches_eager() -> None:
    base = torch.tensor([0, 1, -1, 2, -2, 3, -3, 7])
    _exact(torch.pow, base, torch.tensor([0, 1, 2, 3, 4, 5, 0, 2]))
    _exact(lambda a: a ** 3, base)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("approximate", ("none", "tanh"))
def test_gelu_at_infinities_nan_and_zeros_matches_eager(approximate: str,
                                                        dtype: torch.dtype) -> None:
    x = torch.tensor([INF, -INF, NAN, 0.0, -0.0], dtype=dtype)
    _exact(lambda a: F.gelu(a, approximate=approximate), x)


def test_float32_gelu_on_finite_values_matches_eager() -> None:
    x = torch.linspace(-8, 8, 257)
    (got,) = _compiled(F.gelu, x)
    torch.testing.assert_close(got, F.gelu(x))


_HALF_CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "elu": F.elu,
    "selu": F.selu,
    "celu": lambda a: F.celu(a, alpha=0.7),
    "gelu": F.gelu,
    "gelu_tanh": lambda a: F.gelu(a, approximate="tanh"),
    "silu": F.silu,
    "softplus": F.softplus,
    "hardswish": F.hardswish,  # (mish: refused, test_math_refused.py)
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "log_softmax": lambda a: F.log_softmax(a, -1),
    "log_softmax_to_float32": lambda a: F.log_softmax(a, -1, dtype=torch.float32),
    "softmax": lambda a: F.softmax(a, -1),
}


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("case", sorted(_HALF_CASES))
def test_half_activations_are_computed_in_float32_as_eager(case: str,
                                                           dtype: torch.dtype) -> None:
    fn = _HALF_CASES[case]
    x = torch.linspace(-6, 6, 97).to(dtype)
    (got,) = _compiled(fn, x)
    want = fn(x.clone())
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("fn", (F.elu, F.selu, lambda a: F.celu(a, alpha=0.7)),
                         ids=("elu", "selu", "celu"))
def test_elu_family_at_infinities_nan_and_zeros_matches_eager(fn: Callable[..., Any],
                                                              dtype: torch.dtype) -> None:
    _exact(fn, torch.tensor([INF, -INF, NAN, 0.0, -0.0], dtype=dtype))


@pytest.mark.parametrize("fn", (F.elu, F.selu, lambda a: F.celu(a, alpha=0.7)),
                         ids=("elu", "selu", "celu"))
def test_float32_elu_family_near_zero_matches_eager(fn: Callable[..., Any]) -> None:
    x = torch.cat([-torch.logspace(-8, 1, 50), torch.logspace(-8, 1, 50)])
    (got,) = _compiled(fn, x)
    torch.testing.assert_close(got, fn(x))


@pytest.mark.parametrize("make", [
    lambda: torch.nn.ELU(), lambda: torch.nn.ELU(alpha=0.5, inplace=True), lambda: torch.nn.SELU(),
    lambda: torch.nn.CELU(alpha=2.0),
], ids=["elu", "elu-inplace", "selu", "celu"])
def test_elu_family_trains_under_torch_compile(make: Callable[[], torch.nn.Module]) -> None:
    """Through Dynamo and AOTAutograd, not only ``compile_graph``: the elu entry once
    built its coefficients as tensors, which AOTAutograd traced (a stray ``detach_``:
    every elu and selu graph failed to compile). Forward and gradient equal eager CPU."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(lin, make())
    x = torch.randn(3, 4) * 3
    want = model(x).sum()
    want.backward()
    want_grad = lin.weight.grad.clone()
    lin.weight.grad = None
    dev = model.to("neuron")
    before = torchneuron.compiler.stats()
    got = torch.compile(dev, backend="neuron")(x.to("neuron")).sum()
    got.backward()
    after = torchneuron.compiler.stats()
    torch.testing.assert_close(got.cpu(), want.detach())
    torch.testing.assert_close(lin.weight.grad.cpu(), want_grad)
    assert after["failures"] == before["failures"]  # compiled, not run eagerly
    assert after["compilations"] > before["compilations"]
