"""Compiled reductions on NaN, +-inf, -0.0, ties, uint8 and bool, against eager CPU.

OpInfo samples rarely hold special values, so these graphs feed each op rows built to
hit them: a NaN after a larger number (max.dim gave inf, not NaN), -0.0 tied with 0.0
(cummax keeps the later element: 0.0), uint8 above 127 (amax reduced it as int8), bool
(argmax compiled although eager refuses it). Values are compared exactly: NaN positions,
zero signs, dtypes, shapes and indices. A case eager raises on must raise too, or be
refused at compile time so the graph runs eagerly and eager raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

import torchneuron  # noqa: F401  (registers the backend and device)
from torchneuron.compiler import CompileError, compile_graph

NAN, INF = float("nan"), float("inf")
FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
# a NaN late in a row, -0.0 tied with 0.0, all -inf, inf ties, a NaN first
_ROWS = [[1.0, 5.0, NAN, 3.0], [INF, 1.0, INF, -INF], [2.0, 5.0, 5.0, 1.0],
         [-0.0, 0.0, -0.0, 0.0], [-INF, -INF, -INF, -INF], [NAN, -INF, INF, NAN]]


def _bits_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.is_floating_point():
        assert torch.equal(got.isnan(), want.isnan())
        keep = ~want.isnan()
        assert torch.equal(got[keep], want[keep])
        assert torch.equal(got[keep].signbit(), want[keep].signbit())  # -0.0 vs 0.0
    else:
        assert torch.equal(got, want)


def _matches_eager(fn: Callable[..., Any], *xs: torch.Tensor, refused_ok: bool = False) -> None:
    inputs = list(xs)
    if refused_ok:
        try:
            compile_graph(fn, inputs)
        except CompileError:
            return
    try:
        want = pytree.tree_leaves(fn(*[x.clone() for x in inputs]))
    except (RuntimeError, NotImplementedError):  # eager refuses: so must the compiler
        with pytest.raises((CompileError, RuntimeError)):
            compile_graph(fn, inputs).run(inputs)
        return
    got = compile_graph(fn, inputs).run(inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        _bits_equal(g, w)


_FLOAT_CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "max.dim1": lambda a: torch.max(a, 1),
    "max.dim0_keepdim": lambda a: torch.max(a, 0, keepdim=True),
    "min.dim1_keepdim": lambda a: torch.min(a, 1, keepdim=True),
    "min.dim0": lambda a: torch.min(a, 0),
    "argmax1": lambda a: torch.argmax(a, 1),
    "argmin0": lambda a: torch.argmin(a, 0),
    "argmax_all": lambda a: torch.argmax(a),
    "amax1": lambda a: torch.amax(a, 1),
    "amin0": lambda a: torch.amin(a, 0),
    "cummax1": lambda a: torch.cummax(a, 1),
    "cummin1": lambda a: torch.cummin(a, 1),
    "aminmax1": lambda a: torch.aminmax(a, dim=1),
}


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_extremes_match_eager(dtype: torch.dtype) -> None:
    """Every case in one graph (one compile per dtype, not one per case: each case's
    lowering is its own ops on the same input), each output against eager's bits by name.
    (bfloat16 ``cummax`` / ``cummin`` were left out until ml_dtypes, which Torch-MLIR
    needs for their bfloat16 constant, became a dependency.)"""
    names = sorted(_FLOAT_CASES)
    x = torch.tensor(_ROWS, dtype=dtype)
    want = {n: pytree.tree_leaves(_FLOAT_CASES[n](x.clone())) for n in names}
    got = iter(compile_graph(lambda a: tuple(_FLOAT_CASES[n](a) for n in names), [x]).run([x]))
    bad = []
    for n in names:
        for i, w in enumerate(want[n]):
            g = next(got)
            try:
                _bits_equal(g, w)
            except AssertionError:
                bad.append(f"{n} output {i}: {g} != {w}")
    assert next(got, None) is None, "more outputs than eager's"
    assert not bad, "\n".join(bad)


def test_max_dim_on_random_special_rows_matches_eager() -> None:
    g = torch.Generator().manual_seed(0)
    pool = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 1.0, 1.0, -1.0])
    x = pool[torch.randint(0, len(pool), (40, 6), generator=g)]
    for fn in (lambda a: torch.max(a, 1), lambda a: torch.min(a, 0, keepdim=True)):
        _matches_eager(fn, x)


_INT_CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "max.dim1": lambda a: torch.max(a, 1),
    "min.dim0": lambda a: torch.min(a, 0),
    "argmax1": lambda a: torch.argmax(a, 1),
    "argmin0": lambda a: torch.argmin(a, 0),
    "amax1": lambda a: torch.amax(a, 1),
    "amin0": lambda a: torch.amin(a, 0),
    "max": lambda a: torch.max(a),
    "min": lambda a: torch.min(a),
    "cummax1": lambda a: torch.cummax(a, 1),
}


@pytest.mark.same_on_every_cpu
@pytest.mark.parametrize("dtype", (torch.uint8, torch.int8, torch.int32, torch.bool))
@pytest.mark.parametrize("case", sorted(_INT_CASES))
def test_integer_and_bool_extremes_match_eager(case: str, dtype: torch.dtype) -> None:
    rows = [[3, 200, 200, 7], [0, 1, 255, 128], [9, 9, 2, 9]]
    x = torch.tensor(rows).to(dtype) if dtype != torch.int8 else torch.tensor(rows).sub(128).to(dtype)
    # cummax of bool fails to trace (no iinfo): refused, the graph runs eagerly
    _matches_eager(_INT_CASES[case], x, refused_ok=case == "cummax1" and dtype == torch.bool)


@pytest.mark.same_on_every_cpu
@pytest.mark.parametrize("op", (torch.max, torch.min))
def test_max_of_empty_is_refused_as_eager_raises(op: Callable[..., Any]) -> None:
    _matches_eager(lambda a: op(a), torch.zeros(0, 3))


def test_torch_compile_max_dim_and_max_pool_with_nan_match_eager() -> None:
    """Through Dynamo and AOTAutograd (the table applied twice): the user's max.dim takes
    NaN, the pool's own rule (its window's last NaN) is kept."""
    import torch.nn.functional as F

    def f(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        v, i = a.max(-1)
        p, j = F.max_pool2d(a, 2, return_indices=True)
        return v, i, p, j

    x = torch.randn(1, 2, 4, 4)
    x[0, 0, 1, 3] = x[0, 1, 2, 0] = x[0, 1, 3, 1] = NAN
    x[0, 0, 1, 0] = 50.0  # larger than anything, before the NaN in its row
    torch._dynamo.reset()
    got = torch.compile(f, backend="neuron")(x.to("neuron"))
    for g, w in zip(got, f(x), strict=True):
        _bits_equal(g.cpu(), w)


_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _int_pair(dtype: torch.dtype, zero: bool) -> tuple[torch.Tensor, torch.Tensor]:
    info = torch.iinfo(dtype)
    a = torch.tensor([0, 1, info.max, info.min, 7, info.max - 1, 5, 9], dtype=torch.int64)
    b = torch.tensor([3, info.max, -2, 5, 2, -3, 1, 0 if zero else 4], dtype=torch.int64)
    if dtype == torch.int64:  # past 2**53, where a float64 quotient is no longer exact
        a[5] = 2**62 + 12345
    return a.to(dtype), b.to(dtype)


@pytest.mark.same_on_every_cpu
@pytest.mark.parametrize("dtype", _INTS)
@pytest.mark.parametrize("zero", (False, True), ids=("nonzero", "zero-divisor"))
def test_integer_floor_division_matches_eager(dtype: torch.dtype, zero: bool) -> None:
    """Exact quotients (int64 past 2**53 went through float64) and, for a zero divisor,
    an error as eager raises one (the lowering gave the type's maximum)."""
    a, b = _int_pair(dtype, zero)
    _matches_eager(torch.floor_divide, a, b)
    _matches_eager(lambda p, q: torch.div(p, q, rounding_mode="floor"), a, b)
    divisor = 0 if zero else -3
    _matches_eager(lambda p: p // divisor, a)


def _fmod_operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    a = torch.randn(64, generator=g, dtype=torch.float64) * 1e5  # quotients ~1e5: the
    b = torch.randn(64, generator=g, dtype=torch.float64)        # lowering's rounding shows
    a[:8] = torch.tensor([5.0, -5.0, INF, -INF, NAN, 0.0, -0.0, 3.0], dtype=torch.float64)
    b[:8] = torch.tensor([INF, INF, 2.0, 2.0, 1.0, -2.0, 3.0, 0.0], dtype=torch.float64)
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.float16))
def test_fmod_and_remainder_are_exact_as_eager(dtype: torch.dtype) -> None:
    a, b = _fmod_operands(dtype)
    _matches_eager(torch.fmod, a, b)
    _matches_eager(torch.remainder, a, b)
    _matches_eager(lambda p: torch.remainder(p, 6.283185307179586), a)
    _matches_eager(lambda p: torch.fmod(p, 0.7), a)


def test_uint8_remainder_by_a_negative_scalar_wraps_the_divisor_as_eager() -> None:
    _matches_eager(lambda p: torch.remainder(p, -3), torch.tensor([0, 1, 255, 7, 3, 2],
                                                                   dtype=torch.uint8))


def test_torch_compile_fmod_and_its_gradient_match_eager() -> None:
    """The table applied twice (AOTAutograd, then prepare): still C fmod, and its backward."""
    a, b = _fmod_operands(torch.float32)
    a, b = a[8:], b[8:]

    def f(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return torch.fmod(p, q) * 2 + torch.remainder(p, q)

    pe = a.clone().requires_grad_()
    want = f(pe, b)
    want.sum().backward()
    torch._dynamo.reset()
    pc = a.to("neuron").requires_grad_()
    got = torch.compile(f, backend="neuron")(pc, b.to("neuron"))
    got.sum().backward()
    _bits_equal(got.detach().cpu(), want.detach())
    assert pc.grad is not None and pe.grad is not None
    _bits_equal(pc.grad.cpu(), pe.grad)


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
def test_half_mean_accumulates_in_float32_as_eager(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(3, 1000, generator=g) * 4 + 100).to(dtype)  # float16 sum overflows
    _matches_eager(lambda p: p.mean(), x)
    _matches_eager(lambda p: p.mean(1), x)
    _matches_eager(lambda p: p.mean((0, 1), keepdim=True), x)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.float16))
def test_float_floor_and_trunc_division_match_eager(dtype: torch.dtype) -> None:
    """1.0 // 0.1 is 9 (the rounded quotient is 10), -0.5 // inf is -1, inf // 2 NaN, and
    trunc keeps -0.0; on random operands too (quotients near integers)."""
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(512, generator=g) * 50).to(dtype)
    b = torch.randn(512, generator=g).to(dtype)
    a[:10] = torch.tensor([1.0, 1.0, -0.5, INF, -INF, 5.0, 0.3, -0.3, 7.0, -0.0]).to(dtype)
    b[:10] = torch.tensor([0.1, 0.2, INF, 2.0, 2.0, 0.0, 0.1, 0.1, -2.0, 1.0]).to(dtype)
    _matches_eager(torch.floor_divide, a, b)
    _matches_eager(lambda p, q: torch.div(p, q, rounding_mode="trunc"), a, b)
    _matches_eager(lambda p: p // 0.1, a)
    _matches_eager(lambda p: torch.div(p, 0.3, rounding_mode="trunc"), a)
    _matches_eager(torch.trunc, a / 7)


@pytest.mark.same_on_every_cpu
@pytest.mark.parametrize("op", (torch.cummax, torch.cummin))
def test_int64_cummax_cummin_compare_exactly(op: Callable[..., Any]) -> None:
    """int64 values past 2**53 (the fill was a Python float, so the rows compared in float)."""
    x = torch.tensor([2**62 + 1, 2**62, 2**62 + 3, -2**63, 2**63 - 1, 2**53 + 1, 2**53, 5])
    _matches_eager(lambda p: op(p, 0), x)
    _matches_eager(lambda p: op(p, 0), x.flip(0))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("op", [lambda a, b: a // b, lambda a, b: a % b, torch.fmod],
                         ids=["floordiv", "remainder", "fmod"])  # (eager's trunc traps)
def test_integer_minimum_by_minus_one_matches_eager(op: Callable[..., Any],
                                                    dtype: torch.dtype) -> None:
    """The minimum divided by -1 wraps (and its remainder is 0) as in eager; C's integer
    division traps on it, and the interpreter's divide once killed the process (SIGFPE)."""
    a = torch.tensor([torch.iinfo(dtype).min, 7, -7, 5], dtype=dtype)
    b = torch.tensor([-1, -1, 2, -3], dtype=dtype)
    _matches_eager(op, a, b)


@pytest.mark.parametrize("op", [lambda t: 5 // t, lambda t: -0.3 // t,
                                lambda t: torch.div(5, t, rounding_mode="floor"),
                                lambda t: torch.div(5, t, rounding_mode="trunc")],
                         ids=["5//t", "-0.3//t", "div-floor", "div-trunc"])  # fmt: skip
def test_a_python_number_divided_by_a_tensor_matches_eager(op: Callable[..., Any]) -> None:
    """A Python number on the left took the old lowering (``5 // 0.1`` gave 50, eager 49)."""
    _matches_eager(op, torch.tensor([0.1, -math.inf, 0.3, -0.0, 7.0]))
    _matches_eager(op, torch.tensor([3, -4, 7, 2**40], dtype=torch.int64))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", [lambda t: t // torch.tensor(0.1, device=t.device),
                                lambda t: 5 // t],
                         ids=["by-0d-float32", "number-by-half"])  # fmt: skip
def test_half_floor_division_by_a_wider_operand_matches_or_is_refused(
        op: Callable[..., Any], dtype: torch.dtype) -> None:  # fmt: skip
    """Eager keeps the wider operand when floor-dividing a half tensor; that is not
    lowered exactly, so the graph is refused and runs eagerly (``[1, -0.5, 7] //
    tensor(0.1)`` compiled gave [10, -6, 70], eager [9, -5, 69]), through
    ``compile_graph`` and through ``torch.compile`` (where the refusal must not escape)."""
    x = torch.tensor([1.0, -0.5, 7.0, 0.3, -2.5]).to(dtype)
    _matches_eager(op, x, refused_ok=True)
    torch._dynamo.reset()
    got = torch.compile(op, backend="neuron")(x.to("neuron")).cpu()
    _bits_equal(got, op(x))
