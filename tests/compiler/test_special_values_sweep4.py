"""The special-value sweep over every elementwise and reduction op (issue 22, deliverable
4: ``tools/special_sweep.py --elementwise``) found these compiled results off eager's;
each is compared here with eager CPU under ``torch.compile(backend="neuron")``.

- ``frexp`` of the dtype's largest numbers: the lowering divided by ``2**e``, which
  overflows (float32's max has ``e = 128``), and gave a mantissa of 0, eager 0.99999994.
- ``round(decimals=-3)`` of float32's max: PyTorch's reference multiplies by 0.001 (inexact)
  where ATen divides by 1000, and gave 3.4028233e38 where eager keeps the max.
- half-precision ``logit``: eager rounds to the half type after ``x / (1 - x)`` and after
  the log (float16 ``logit(0.47)`` -0.12079, the lowering's -0.12024); eager's kernel now.
- ``special.entr``: eager takes the C library's ``log`` (``entr(1.5)`` one ulp off when
  lowered); eager's kernel now.
"""

from __future__ import annotations

import pytest
import torch

HALF = (torch.float16, torch.bfloat16)


def _values(dtype: torch.dtype) -> torch.Tensor:
    """67 values (two 16-wide vector blocks and a scalar tail) with the specials written
    in: the dtype's max and -max, its smallest subnormal, +-0, 1.5, NaN and +-inf."""
    fi = torch.finfo(dtype)
    x = torch.rand(67, generator=torch.Generator().manual_seed(3)) * 2 - 1
    x = x.to(dtype)
    specials = [fi.max, -fi.max, fi.smallest_normal * fi.eps, -0.0, 0.0, 1.5,
                float("nan"), float("inf"), -float("inf"), -0.3]
    for i, v in enumerate(specials):
        x[i * 6] = v
        x[66 - i] = v  # and in the scalar tail
    return x


def _program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    m, e = torch.frexp(x)
    return (m, e, torch.round(x, decimals=-3), torch.round(x, decimals=2),
            torch.logit(x.abs()), torch.logit(x.abs(), eps=1e-3), torch.special.entr(x))


def _same(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Per element: equal bits up to NaN payloads (the zero's sign included)."""
    if not want.is_floating_point():
        return got == want
    return ((got == want) & (got.signbit() == want.signbit())) | (got.isnan() & want.isnan())


@pytest.mark.parametrize("dtype", [torch.float32, *HALF], ids=str)
def test_special_values_compile_to_eagers_bits(dtype: torch.dtype) -> None:
    x = _values(dtype)
    want = _program(x)
    torch._dynamo.reset()
    got = torch.compile(_program, backend="neuron")(x.to("neuron"))
    names = ("frexp.mantissa", "frexp.exponent", "round-3", "round2", "logit", "logit_eps",
             "entr")
    bad = {}
    for name, g, w in zip(names, got, want, strict=True):
        same = _same(g.cpu(), w)
        if not bool(same.all()):
            i = int((~same).nonzero()[0])
            bad[name] = f"{int((~same).sum())} differ, [{i}] of {x[i].item()!r}: " \
                        f"{g.cpu()[i].item()!r} != {w[i].item()!r}"
    assert not bad, bad
