"""Elementwise math and the antialiased resize whose eager bits no lowering reproduces are
refused (decomp/refusals/math_bits.py, decomp/resample.py), and torch.compile and adaptive
eager's replays give eager's bits.

Each was a LAST-BIT or MISMATCH op of the replay sweep (issue 22): compiled, they differed
from eager in the last bits of 5 to 75% of random float32 elements. The bits are compared
with eager CPU on this machine, whatever its CPU: a refused op runs eager's own kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import torchneuron
from torchneuron import adaptive_eager
from torchneuron.compiler import CompileError, compile_graph
from torchneuron.compiler.decomp.refusals.math_bits import CPU_DEPENDENT, EAGER_BITS
from torchneuron.hardware.settings import override

S = torch.special


def _u(lo: float, hi: float, n: int = 67) -> torch.Tensor:
    """n values in [lo, hi): 67 fills two 16-wide vector blocks and a scalar tail."""
    return torch.rand(n, generator=torch.Generator().manual_seed(7)) * (hi - lo) + lo


# one call per refused packet (the Chebyshev family by one member of each kind)
UNARY: dict[str, tuple[Callable[..., torch.Tensor], tuple[float, float]]] = {
    "acos": (torch.acos, (-1, 1)), "acosh": (torch.acosh, (1, 9)),
    "asin": (torch.asin, (-1, 1)), "asinh": (torch.asinh, (-9, 9)),
    "atan": (torch.atan, (-9, 9)), "atanh": (torch.atanh, (-1, 1)),
    "cosh": (torch.cosh, (-9, 9)), "sinh": (torch.sinh, (-9, 9)),
    "erfc": (torch.erfc, (-3, 3)), "erfinv": (torch.erfinv, (-1, 1)),
    "exp2": (torch.exp2, (-9, 9)), "i0": (torch.i0, (-9, 9)),
    "lgamma": (torch.lgamma, (-9, 9)), "digamma": (torch.digamma, (-9, 9)),
    "polygamma": (lambda x: torch.polygamma(2, x), (0.1, 9)),
    "mvlgamma": (lambda x: torch.mvlgamma(x, 3), (1.1, 9)),
    "log10": (torch.log10, (0.1, 9)), "log2": (torch.log2, (0.1, 9)),
    "log_sigmoid": (F.logsigmoid, (-9, 9)), "mish": (F.mish, (-9, 9)),
    "bessel_j0": (S.bessel_j0, (-9, 9)), "bessel_j1": (S.bessel_j1, (-9, 9)),
    "bessel_y0": (S.bessel_y0, (0.1, 9)), "bessel_y1": (S.bessel_y1, (0.1, 9)),
    "airy_ai": (S.airy_ai, (-5, 5)), "erfcx": (S.erfcx, (-9, 9)),
    "i0e": (S.i0e, (-9, 9)), "i1": (S.i1, (-9, 9)), "i1e": (S.i1e, (-9, 9)),
    "log_ndtr": (S.log_ndtr, (-9, 9)),
    "ndtri": (S.ndtri, (0, 1)), "spherical_bessel_j0": (S.spherical_bessel_j0, (-9, 9)),
    "modified_bessel_i0": (S.modified_bessel_i0, (-9, 9)),
    "modified_bessel_i1": (S.modified_bessel_i1, (-9, 9)),
    "modified_bessel_k0": (S.modified_bessel_k0, (0.1, 9)),
    "modified_bessel_k1": (S.modified_bessel_k1, (0.1, 9)),
    "scaled_modified_bessel_k0": (S.scaled_modified_bessel_k0, (0.1, 9)),
    "scaled_modified_bessel_k1": (S.scaled_modified_bessel_k1, (0.1, 9)),
    "hermite_h": (lambda x: S.hermite_polynomial_h(x, 9.0), (-3, 3)),
    "hermite_he": (lambda x: S.hermite_polynomial_he(x, 9.0), (-3, 3)),
    "chebyshev_t": (lambda x: S.chebyshev_polynomial_t(x, 9.0), (-3, 3)),
    "shifted_chebyshev_w": (lambda x: S.shifted_chebyshev_polynomial_w(x, 9.0), (-3, 3)),
}
BINARY: dict[str, Callable[..., torch.Tensor]] = {
    "logaddexp": torch.logaddexp, "xlogy": lambda a, b: torch.xlogy(a, b.abs()),
    "xlog1py": lambda a, b: S.xlog1py(a, b.abs()), "zeta": lambda a, b: S.zeta(a.abs() + 1, b.abs()),
}
REASONS = ("cpu-dependent-math", "eager-math-bits")


def _inputs(name: str) -> list[torch.Tensor]:
    if name in UNARY:
        return [_u(*UNARY[name][1])]
    return [_u(-5, 5), _u(-5, 5).flip(0)]


def _fn(name: str) -> Callable[..., torch.Tensor]:
    return UNARY[name][0] if name in UNARY else BINARY[name]


def _bits_equal(got: torch.Tensor, want: torch.Tensor) -> bool:
    same = (got == want) & (got.signbit() == want.signbit())
    return bool((same | (got.isnan() & want.isnan())).all())


@pytest.mark.parametrize("name", [*UNARY, *BINARY])
def test_refused_with_a_typed_reason(name: str) -> None:
    with pytest.raises(CompileError) as err:
        compile_graph(_fn(name), _inputs(name), name=name)
    assert err.value.reason in REASONS and err.value.stage == "prepare", err.value


def test_every_listed_packet_is_an_aten_op_with_a_test() -> None:
    """The lists name real ops (a typo would refuse nothing) and each is tested above."""
    tested = {*UNARY, *BINARY, "log_sigmoid_forward"}
    for packet in (*CPU_DEPENDENT, *EAGER_BITS):
        assert getattr(torch.ops.aten, packet).overloads()
        short = packet.removeprefix("special_").removeprefix("shifted_")
        short = short.replace("_polynomial", "").replace("chebyshev_u", "chebyshev_t")
        assert short in tested or short.startswith("chebyshev_"), packet


# torch.compile: a refused graph runs eagerly, with eager's bits (before the refusal,
# acos differed in 123 of 1000 random elements, lgamma in 145)
_COMPILED = ("acos", "lgamma", "mish", "logaddexp")


@pytest.mark.parametrize("name", _COMPILED)
def test_torch_compile_gives_eagers_bits(name: str) -> None:
    fn, xs = _fn(name), _inputs(name)
    want = fn(*xs)
    torch._dynamo.reset()
    got = torch.compile(lambda *a: fn(*a) * 1.0, backend="neuron")(
        *[x.to("neuron") for x in xs]).cpu()
    assert _bits_equal(got, want), f"{int((got != want).sum())} of {want.numel()} differ"


def test_antialiased_resize_is_refused_and_gives_eagers_bits() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, size=(5, 7), mode="bilinear", antialias=True)

    x = torch.randn(2, 3, 13, 17, generator=torch.Generator().manual_seed(0))
    with pytest.raises(CompileError) as err:
        compile_graph(fn, [x])
    assert err.value.reason == "upsample-antialias"
    want = fn(x)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(x.to("neuron")).cpu()
    assert torch.equal(got, want), f"{int((got != want).sum())} of {want.numel()} differ"


def test_adaptive_eager_replays_around_refused_math_with_eagers_bits() -> None:
    """A loop of ``mish(x * w) + lgamma(x)``: both refused ops are learned and run eagerly
    between regions, the multiply and add replay as programs, every step equals eager."""
    x, w = _u(0.5, 4), _u(-2, 2)

    def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.mish(x * w) + torch.lgamma(x) * 0.5

    want = step(x, w)
    xd, wd = x.to("neuron"), w.to("neuron")
    torchneuron.reset()  # refusals learned by earlier tests in this process
    adaptive_eager.enable()
    try:  # every region pays and replays its program (as tools/replay_sweep.py runs them)
        with override(ae_min_gain_ns=-1, ae_first_tier=False):
            got = [step(xd, wd).cpu() for _ in range(8)]
        stats = adaptive_eager.stats()
    finally:
        adaptive_eager.disable()
    for i, g in enumerate(got):
        assert _bits_equal(g, want), f"step {i}: {int((g != want).sum())} differ"
    assert set(stats["refused_ops"].values()) <= set(REASONS) and stats["refused_ops"], stats
    assert stats["replays"] - stats["first_tier_replays"] > 0, stats
