"""Special functions through the whole compiler: eager's own kernels, eager's bits.

compiler/decomp/special.py computed these within the coverage sweep's tolerance, but not
with eager's bits (the replay sweep's LAST-BIT ops, issue 22); they were then refused.
Now each runs eager's own kernel inside the program (``decomp/eager_kernels.py``). Each
op is tried on a grid covering its branches (reflection below 0.5, the shift loops,
series / asymptotic switch points, overflow, +-0, +-inf, NaN) and must give eager's bits
there, on whatever CPU runs the test.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from torchneuron.compiler import CompileError, compile_graph


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


def _bits_equal(got: torch.Tensor, want: torch.Tensor) -> bool:
    same = (got == want) & (got.signbit() == want.signbit())
    return bool((same | (got.isnan() & want.isnan())).all())


def test_special_functions_give_eagers_bits_on_their_grids() -> None:
    """Every case in one program (one compile)."""
    names = sorted(CASES)

    def program(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(CASES[n][0](x) for n, x in zip(names, xs, strict=True))

    inputs = [CASES[n][1] for n in names]
    got = compile_graph(program, inputs, name="special").run(inputs)
    bad = {n: int((g != w).sum()) for n, g, w in zip(names, got, program(*inputs), strict=True)
           if not _bits_equal(g, w)}
    assert not bad, f"differing elements per function: {bad}"


def test_integer_input_gives_eagers_bits() -> None:
    x = torch.arange(-3, 8)

    def fn(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.lgamma(t), torch.special.i0e(t), torch.digamma(t)

    for g, w in zip(compile_graph(fn, [x]).run([x]), fn(x), strict=True):
        assert g.dtype == w.dtype and _bits_equal(g, w)


@pytest.mark.same_on_every_cpu
def test_unbounded_kernels_are_refused_not_approximated() -> None:
    """igamma's series and continued fraction run up to 2000 trips: it runs eagerly
    (zeta, unbounded only for negative q, is regrouped there: decomp_zeta)."""
    x = torch.rand(5) + 1.5
    with pytest.raises(CompileError, match="no-lowering|igamma"):
        compile_graph(lambda t: torch.igamma(t, t), [x])


@pytest.mark.parametrize("op", [torch.special.hermite_polynomial_h, torch.special.hermite_polynomial_he],
                         ids=["h", "he"])
def test_hermite_with_a_degree_per_element_gives_eagers_bits(
        op: Callable[..., torch.Tensor]) -> None:
    """n is data (eager's recurrence runs n steps per element: no bounded unrolled
    lowering gives its bits, eager's kernel does)."""
    x = torch.linspace(-3, 3, 16)
    n = torch.tensor([0.0, 1.0, 2.0, 3.0, 5.5, 7.0, -1.0, 127.0, 128.0, 129.0, 300.0,
                      float("nan"), float("inf"), 20.0, 4.0, 9.0])
    [got] = compile_graph(op, [x, n]).run([x, n])
    assert _bits_equal(got, op(x, n))
