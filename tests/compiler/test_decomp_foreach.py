"""Foreach ops (``_foreach_mul`` / ``_foreach_add`` / ``_foreach_addcmul`` /
``_foreach_addcdiv``, every overload, and the optimizers' others: ``lerp``, ``sqrt``, ``div``,
``sub``, ``maximum``/``minimum``, ``neg``, ``reciprocal``, ``abs``, ``zero``, ``norm``)
compiled with eager's bits, or refused.

Eager is ATen's CPU foreach kernel, which runs the per-tensor op for each tensor; the
tests compare with both (the per-tensor ops where eager's in-place and out-of-place
forms agree). The inputs hold the cases a wrong rounding shows: random values over
odd lengths, signed zeros, infinities, NaN, and products whose float64 sum lands on a
float32 rounding midpoint (where rounding twice gives the other neighbour). Only the
fused multiply-add matters there, and every AVX2 / AVX-512 CPU rounds it once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.compiler.exact import bits_equal
from torchneuron.compiler import compile_graph
from torchneuron.compiler.decomp.foreach import FOREACH_DECOMPOSITIONS

aten = torch.ops.aten
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
SHAPES = ((37,), (5, 7), (1,), (64,))
SCALARS = [0.3, -2.0, 1e-3, 1.0]
F32 = torch.tensor(SCALARS).tolist()  # the Tensor overloads' scalars: float32 values
ALPHA = 0.01


def _inputs(dtype: torch.dtype, seed: int) -> list[list[torch.Tensor]]:
    """self, tensor1, tensor2: random lists, the last tensor's head set to special
    values (tensor2 kept away from zero: a division by it should stay finite mostly)."""
    g = torch.Generator().manual_seed(seed)
    out = [[torch.randn(s, generator=g).to(dtype) for s in SHAPES] for _ in range(3)]
    for t in out[2]:
        t.abs_().add_(0.25)
    special = [0.0, -0.0, float("inf"), float("nan"), 1.0, -1.0]
    out[0][-1][: len(special)] = torch.tensor(special, dtype=dtype)
    out[1][-1][: len(special)] = torch.tensor(special[::-1], dtype=dtype)
    if dtype == torch.float32:  # fma(a, b, c) = c where rounding twice gives c + ulp
        a, b, c = 1 + 2.0**-23, 2.0**16 * (1 - 2.0**-23), 2.0**40 + 2.0**17
        for s in (1.0, -1.0):
            out[0][-1][8 + (s < 0)] = s * c
            out[1][-1][8 + (s < 0)] = s * a
            out[2][-1][8 + (s < 0)] = b
    return out


# name -> (foreach call on (self, tensor1, tensor2), per-tensor op on (s, t1, t2, i))
# (the ``Tensor`` overloads' 0-d other and 1-d scalars come in as ``k``: graph inputs)
_Call = Callable[[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], str,
                  tuple[torch.Tensor, torch.Tensor]], Any]
EXTRA = (torch.tensor(0.37), torch.tensor(SCALARS))
CASES: dict[str, tuple[_Call, Callable[..., torch.Tensor]]] = {
    "mul.Scalar": (lambda s, a, b, f, k: getattr(torch, f"_foreach_mul{f}")(s, 0.99),
                   lambda s, a, b, i: torch.mul(s, 0.99)),
    "mul.ScalarList": (lambda s, a, b, f, k: getattr(torch, f"_foreach_mul{f}")(s, SCALARS),
                       lambda s, a, b, i: torch.mul(s, SCALARS[i])),
    "mul.List": (lambda s, a, b, f, k: getattr(torch, f"_foreach_mul{f}")(s, a),
                 lambda s, a, b, i: torch.mul(s, a)),
    "mul.Tensor": (lambda s, a, b, f, k: getattr(aten, f"_foreach_mul{f}").Tensor(s, k[0]),
                   lambda s, a, b, i: torch.mul(s, torch.tensor(0.37))),
    "add.Scalar": (lambda s, a, b, f, k: getattr(torch, f"_foreach_add{f}")(s, 0.01),
                   lambda s, a, b, i: torch.add(s, 0.01)),
    "add.ScalarList": (lambda s, a, b, f, k: getattr(torch, f"_foreach_add{f}")(s, SCALARS),
                       lambda s, a, b, i: torch.add(s, SCALARS[i])),
    "add.List": (lambda s, a, b, f, k: getattr(torch, f"_foreach_add{f}")(s, a),
                 lambda s, a, b, i: torch.add(s, a)),
    "add.List.alpha": (lambda s, a, b, f, k: getattr(torch, f"_foreach_add{f}")(s, b, alpha=ALPHA),
                       lambda s, a, b, i: torch.add(s, b, alpha=ALPHA)),
    "add.Tensor.alpha": (lambda s, a, b, f, k: getattr(aten, f"_foreach_add{f}").Tensor(
        s, k[0], alpha=-ALPHA), lambda s, a, b, i: torch.add(s, torch.tensor(0.37), alpha=-ALPHA)),
    "addcmul.Scalar": (lambda s, a, b, f, k: getattr(torch, f"_foreach_addcmul{f}")(s, a, b, 0.3),
                       lambda s, a, b, i: torch.addcmul(s, a, b, value=0.3)),
    "addcmul.one": (lambda s, a, b, f, k: getattr(torch, f"_foreach_addcmul{f}")(s, a, b),
                    lambda s, a, b, i: torch.addcmul(s, a, b)),
    "addcmul.ScalarList": (lambda s, a, b, f, k: getattr(torch, f"_foreach_addcmul{f}")(s, a, b, SCALARS),
                           lambda s, a, b, i: torch.addcmul(s, a, b, value=SCALARS[i])),
    "addcmul.Tensor": (lambda s, a, b, f, k: getattr(torch, f"_foreach_addcmul{f}")(
        s, a, b, k[1]), lambda s, a, b, i: torch.addcmul(s, a, b, value=F32[i])),
    "addcdiv.Scalar": (lambda s, a, b, f, k: getattr(torch, f"_foreach_addcdiv{f}")(s, a, b, -3e-3),
                       lambda s, a, b, i: torch.addcdiv(s, a, b, value=-3e-3)),
    "addcdiv.ScalarList": (lambda s, a, b, f, k: getattr(torch, f"_foreach_addcdiv{f}")(s, a, b, SCALARS),
                           lambda s, a, b, i: torch.addcdiv(s, a, b, value=SCALARS[i])),
    "addcdiv.Tensor": (lambda s, a, b, f, k: getattr(torch, f"_foreach_addcdiv{f}")(
        s, a, b, k[1]), lambda s, a, b, i: torch.addcdiv(s, a, b, value=F32[i])),
}


def _fe(name: str, f: str) -> Any:
    return getattr(torch, f"_foreach_{name}{f}")


CASES |= {
    "lerp.Scalar": (lambda s, a, b, f, k: _fe("lerp", f)(s, a, 0.3),
                    lambda s, a, b, i: torch.lerp(s, a, 0.3)),
    "lerp.ScalarList": (lambda s, a, b, f, k: _fe("lerp", f)(s, a, SCALARS),
                        lambda s, a, b, i: torch.lerp(s, a, SCALARS[i])),
    "lerp.List": (lambda s, a, b, f, k: _fe("lerp", f)(s, a, b),
                  lambda s, a, b, i: torch.lerp(s, a, b)),
    "div.Scalar": (lambda s, a, b, f, k: _fe("div", f)(s, 0.37),
                   lambda s, a, b, i: torch.div(s, 0.37)),
    "div.ScalarList": (lambda s, a, b, f, k: _fe("div", f)(s, SCALARS),
                       lambda s, a, b, i: torch.div(s, SCALARS[i])),
    "div.List": (lambda s, a, b, f, k: _fe("div", f)(s, b), lambda s, a, b, i: torch.div(s, b)),
    "div.Tensor": (lambda s, a, b, f, k: getattr(aten, f"_foreach_div{f}").Tensor(s, k[0]),
                   lambda s, a, b, i: torch.div(s, torch.tensor(0.37))),
    "sub.Scalar": (lambda s, a, b, f, k: _fe("sub", f)(s, 0.01),
                   lambda s, a, b, i: torch.sub(s, 0.01)),
    "sub.ScalarList": (lambda s, a, b, f, k: _fe("sub", f)(s, SCALARS),
                       lambda s, a, b, i: torch.sub(s, SCALARS[i])),
    "sub.List": (lambda s, a, b, f, k: _fe("sub", f)(s, a), lambda s, a, b, i: torch.sub(s, a)),
    "maximum.List": (lambda s, a, b, f, k: _fe("maximum", f)(s, a),
                     lambda s, a, b, i: torch.maximum(s, a)),
    "maximum.Scalar": (lambda s, a, b, f, k: _fe("maximum", f)(s, 0.1),
                       lambda s, a, b, i: torch.clamp_min(s, 0.1)),
    "maximum.ScalarList": (lambda s, a, b, f, k: _fe("maximum", f)(s, SCALARS),
                           lambda s, a, b, i: torch.clamp_min(s, SCALARS[i])),
    "minimum.List": (lambda s, a, b, f, k: _fe("minimum", f)(s, a),
                     lambda s, a, b, i: torch.minimum(s, a)),
    "minimum.Scalar": (lambda s, a, b, f, k: _fe("minimum", f)(s, 0.1),
                       lambda s, a, b, i: torch.clamp_max(s, 0.1)),
    "sqrt": (lambda s, a, b, f, k: _fe("sqrt", f)(s), lambda s, a, b, i: torch.sqrt(s)),
    "neg": (lambda s, a, b, f, k: _fe("neg", f)(s), lambda s, a, b, i: torch.neg(s)),
    "reciprocal": (lambda s, a, b, f, k: _fe("reciprocal", f)(s),
                   lambda s, a, b, i: torch.reciprocal(s)),
    "abs": (lambda s, a, b, f, k: _fe("abs", f)(s), lambda s, a, b, i: torch.abs(s)),
    "zero": (lambda s, a, b, f, k: torch._foreach_zero_(s) if f else aten._foreach_zero(s),
             lambda s, a, b, i: torch.zeros_like(s)),
    "norm": (lambda s, a, b, f, k: torch._foreach_norm(s, 2) if not f else None,
             lambda s, a, b, i: torch.linalg.vector_norm(s, 2)),
    "norm.inf": (lambda s, a, b, f, k: torch._foreach_norm(s, float("inf")) if not f else None,
                 lambda s, a, b, i: torch.linalg.vector_norm(s, float("inf"))),
}
_OUT_OF_PLACE_ONLY = ("norm", "norm.inf")
# refused (module docstring of decomp_foreach): eager's own arithmetic cannot be matched
_HALVES = (torch.float16, torch.bfloat16)
REFUSED = {(c, d) for d in _HALVES for c in ("mul.Scalar", "mul.ScalarList", "add.List.alpha",
                                              "add.Tensor.alpha")}
REFUSED |= {(c, torch.float64) for c in ("add.List.alpha", "add.Tensor.alpha", "addcmul.Scalar",
                                         "addcmul.one", "addcmul.ScalarList", "addcmul.Tensor")}


# functionalization runs an in-place op on meta tensors first, where these overloads
# raise ("Expected scalars to be on CPU"): the trace fails, the graph runs eagerly
_UNTRACEABLE_IN_PLACE = ("addcmul.Tensor", "addcdiv.Tensor")


def _run(case: str, xs: list[list[torch.Tensor]], inplace: bool) -> list[torch.Tensor]:
    s, a, b = ([t.clone() for t in ts] for ts in xs)
    out = CASES[case][0](s, a, b, "_" if inplace else "", EXTRA)
    return s if inplace else list(out)


class _Decomposed(torch.utils._python_dispatch.TorchDispatchMode):
    """Runs the foreach ops through their decompositions, eagerly on CPU tensors;
    ``refused`` collects the ops whose decomposition declined."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[Any] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        functional = getattr(aten, func._overloadpacket.__name__.rstrip("_"), None)
        if func._overloadpacket.__name__.endswith("_") and functional is not None:
            fn = FOREACH_DECOMPOSITIONS.get(getattr(functional, func._overloadname))
            if fn is not None:  # in place: the functional form, then the write-back
                out = fn(*args, **kwargs)
                if out is NotImplemented:
                    self.refused.append(func)
                    return func(*args, **kwargs)
                for t, v in zip(args[0], out, strict=True):
                    t.copy_(v)
                return None
        fn = FOREACH_DECOMPOSITIONS.get(func)
        if fn is not None:
            out = fn(*args, **kwargs)
            if out is not NotImplemented:
                return out
            self.refused.append(func)
        return func(*args, **kwargs)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_decompositions_give_eagers_bits_or_refuse(dtype: torch.dtype) -> None:
    """Every overload, in place and not: the decomposition's arithmetic (run eagerly,
    as the compiled graph runs it) equals eager's foreach kernel and the per-tensor ops,
    bit for bit; the refused combinations are exactly the documented ones."""
    xs = _inputs(dtype, seed=1)
    for case, (_, per_tensor) in CASES.items():
        for inplace in (False, True):
            if inplace and case in _OUT_OF_PLACE_ONLY:
                continue
            want = _run(case, xs, inplace)
            with _Decomposed() as mode:
                got = _run(case, xs, inplace)
            refused = bool(mode.refused)
            assert refused == ((case, dtype) in REFUSED), (case, dtype, inplace)
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                bits_equal(g, w, f"{case} inplace={inplace} tensor {i}")
            if not (inplace and (case, dtype) in REFUSED):  # the slow path's per-tensor op
                for i, w in enumerate(want):
                    if (case, dtype) in REFUSED and inplace:
                        continue  # eager's in-place form rounds the number first
                    bits_equal(w, per_tensor(xs[0][i], xs[1][i], xs[2][i], i), f"{case} {i}")


@pytest.mark.parametrize(("dtype", "inplace"), [(torch.float32, False), (torch.float32, True),
                                               (torch.bfloat16, False)], ids=str)
def test_compiled_foreach_equals_eager(dtype: torch.dtype, inplace: bool) -> None:
    """One graph holding every overload that is not refused: compiled through Torch-MLIR
    and the simulator, eager's bits (in place: the values written back)."""
    xs = _inputs(dtype, seed=2)
    cases = [c for c in CASES if (c, dtype) not in REFUSED
             and not (inplace and c in (*_UNTRACEABLE_IN_PLACE, *_OUT_OF_PLACE_ONLY))]
    flat = [t for ts in xs for t in ts] + list(EXTRA)
    n = len(SHAPES)

    def graph(*ts: torch.Tensor) -> list[torch.Tensor]:
        s, a, b = list(ts[:n]), list(ts[n:2 * n]), list(ts[2 * n:3 * n])
        k = (ts[-2], ts[-1])
        out: list[torch.Tensor] = []
        for case in cases:
            if inplace:
                s2 = [t.clone() for t in s]
                CASES[case][0](s2, a, b, "_", k)
                out += s2
            else:
                out += list(CASES[case][0](s, a, b, "", k))
        return out

    got = compile_graph(graph, flat).run([t.clone() for t in flat])
    want = [w for case in cases for w in _run(case, xs, inplace)]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        bits_equal(g, w, f"{cases[i // n]} inplace={inplace} tensor {i % n}")
