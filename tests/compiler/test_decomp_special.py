"""Special functions (compiler/decomp_special.py) through the whole compiler, against eager.

Each op is compiled on a grid that covers its branches (reflection below 0.5, the shift
loops, series / asymptotic switch points, overflow, +-0, +-inf, NaN) and compared with
eager CPU at the coverage sweep's tolerance, NaN equal to NaN. The polynomial fits these
replace failed here (NaN for negative polygamma arguments, -inf for tiny ndtri inputs,
NaN at infinities).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from torchneuron.compiler import compile_graph

RTOL, ATOL = 1e-3, 1e-4  # tools/lowering_coverage.py's


def _grid(lo: float, hi: float, n: int = 401) -> torch.Tensor:
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -2.5, 8.0, -8.0, 10.0, 30.0, 30.5, -19.5, 1e-30,
             -1e-30, 1e-45, 90.0, 100.0, -100.0, 1e6, -1e6, 3e38, -3e38, float("inf"),
             float("-inf"), float("nan")]
    return torch.cat([torch.linspace(lo, hi, n), torch.tensor(edges)])


def _unit(n: int = 401) -> torch.Tensor:
    return torch.cat([torch.linspace(-1, 1, n), torch.tensor(
        [0.99999, -0.999999, 1e-30, 1e-45, 1 - 6e-8, 2.0, -1.0, float("nan")])])


CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]] = {
    "lgamma": (torch.lgamma, _grid(-50, 50)),
    "digamma": (torch.digamma, _grid(-30, 30)),
    "polygamma1": (lambda x: torch.polygamma(1, x), _grid(-20, 20)),
    "polygamma2": (lambda x: torch.polygamma(2, x), _grid(-20, 20)),
    "polygamma5": (lambda x: torch.polygamma(5, x), _grid(-20, 20)),
    "polygamma8": (lambda x: torch.polygamma(8, x), _grid(-20, 20)),
    "erfc": (torch.erfc, _grid(-12, 12)),
    "erfcx": (torch.special.erfcx, _grid(-30, 30, 4001)),
    "erfinv": (torch.erfinv, _unit()),
    "ndtri": (torch.special.ndtri, _unit().abs()),
    "log_ndtr": (torch.special.log_ndtr, _grid(-60, 10)),
    "i0": (torch.i0, _grid(-100, 100)),
    "i0e": (torch.special.i0e, _grid(-100, 100)),
    "i1": (torch.special.i1, _grid(-100, 100)),
    "i1e": (torch.special.i1e, _grid(-100, 100)),
    "spherical_bessel_j0": (torch.special.spherical_bessel_j0, _grid(-20, 20)),
    "k0": (torch.special.modified_bessel_k0, _grid(-3, 120)),
    "k1": (torch.special.modified_bessel_k1, _grid(-3, 120)),
    "k0e": (torch.special.scaled_modified_bessel_k0, _grid(-3, 120)),
    "k1e": (torch.special.scaled_modified_bessel_k1, _grid(-3, 120)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_special_function_compiles_to_eagers_numbers(name: str) -> None:
    fn, x = CASES[name]
    exe = compile_graph(fn, [x], name=name)
    got = exe.run([x])[0]
    want = fn(x)
    assert got.dtype == want.dtype
    bad = ~torch.isclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)
    assert not bool(bad.any()), (f"{int(bad.sum())} differ, e.g. x={x[bad][:4].tolist()}: "
                                 f"got {got[bad][:4].tolist()}, eager {want[bad][:4].tolist()}")


def test_integer_input_promotes_like_eager() -> None:
    x = torch.arange(-3, 8)
    exe = compile_graph(lambda t: (torch.lgamma(t), torch.special.i0e(t), torch.digamma(t)), [x])
    for got, want in zip(exe.run([x]), (torch.lgamma(x), torch.special.i0e(x), torch.digamma(x)),
                         strict=True):
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)


def test_unbounded_kernels_are_refused_not_approximated() -> None:
    """igamma's series and continued fraction run up to 2000 trips: it runs eagerly
    (zeta, unbounded only for negative q, is regrouped there: decomp_zeta)."""
    from torchneuron.compiler import CompileError

    x = torch.rand(5) + 1.5
    with pytest.raises(CompileError, match="no-lowering|igamma"):
        compile_graph(lambda t: torch.igamma(t, t), [x])


def test_erfcx_within_a_few_ulps_of_eager() -> None:
    """Below 0 eager computes 2 exp(x*x) with x*x rounded to float32; so does ours."""
    x = torch.cat([torch.linspace(-9.5, 9.5, 20001), torch.tensor([-26.0, -9.38, 1e30, 3e38])])
    got = compile_graph(torch.special.erfcx, [x]).run([x])[0]
    torch.testing.assert_close(got, torch.special.erfcx(x), rtol=2e-6, atol=0)


@pytest.mark.parametrize("op", [torch.special.hermite_polynomial_h, torch.special.hermite_polynomial_he],
                         ids=["h", "he"])
def test_hermite_recurrence_bounded_by_atens_limit(op: Callable[..., torch.Tensor]) -> None:
    """n is data: the recurrence is unrolled to ATen's float32 limit (128; NaN above),
    n truncated, 0 below 0, NaN / inf n as -1."""
    x = torch.cat([torch.linspace(-3, 3, 14), torch.tensor([0.0, float("nan")])])
    n = torch.tensor([0.0, 1.0, 2.0, 3.0, 5.5, 7.0, -1.0, 127.0, 128.0, 129.0, 300.0,
                      float("nan"), float("inf"), 20.0, 4.0, 9.0])
    got = compile_graph(op, [x, n]).run([x, n])[0]
    want = op(x, n)
    bad = ~torch.isclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert not bool(bad.any()), (n[bad].tolist(), got[bad].tolist(), want[bad].tolist())
