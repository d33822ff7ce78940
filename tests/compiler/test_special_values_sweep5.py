"""The last mismatches of the special-value sweep under torch.compile (issue 22,
``tools/special_sweep.py --elementwise``), each compared with eager CPU bit for bit.

- ``F.softshrink``: ATen's scalar tail computes ``x * 0`` inside the band (-0.0 for a
  negative x), its vector body masks (+0.0); ``softshrink(-0.0, 0)`` compiled gave -0.0
  where eager gave 0.0. Its backward, and hardshrink's, give the gradient at a NaN input
  in the tail and 0 in the body. Where the tail starts depends on the CPU's vector width,
  so these are eager's own kernels in the program now (hardshrink's forward too: lowered,
  its bfloat16 form was refused).
- ``var`` / ``std`` of float32 over every element: eager takes the mean in float32 in its
  vector loop's order, which overflows to NaN at +-3.4e38 and +-1e30 where the lowering
  gave inf. The variance family is eager's kernel now.
- ``linalg.vector_norm`` / ``masked.norm`` over dims of size 1: ATen returns ``abs(x)``
  without reducing; the lowering's ``sum(|x| ** p) ** (1 / p)`` overflowed to inf at the
  dtype's max.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchneuron
from tests.compiler.exact import torch_compile_matches_eager

HALF = (torch.float16, torch.bfloat16)
NAN = float("nan")


def _band(dtype: torch.dtype) -> torch.Tensor:
    """67 values: -0.0, +-0.3 (inside a 0.5 band), NaN and +-2 spread over two 32-wide
    vector blocks and a scalar tail, on every CPU's vector width."""
    values = [-0.0, -0.3, 0.3, NAN, -2.0, 2.0, 0.0]
    return torch.tensor([values[i % len(values)] for i in range(67)], dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, *HALF], ids=str)
def test_shrinks_inside_their_band_and_at_nan(dtype: torch.dtype) -> None:
    """softshrink at lambd 0 and 0.5 and hardshrink, outputs and the input's gradient
    (the sum of the three ops' gradients: 0 or 3 per element)."""
    def shrinks(x: torch.Tensor) -> torch.Tensor:
        return torch.stack([F.softshrink(x, 0.0), F.softshrink(x, 0.5), F.hardshrink(x, 0.5)])

    failures = torchneuron.compiler.stats()["failures"]
    torch_compile_matches_eager(shrinks, _band(dtype), grad=True)
    assert torchneuron.compiler.stats()["failures"] == failures  # compiled (bfloat16 too)


def _big() -> torch.Tensor:
    """The sweep's ``big`` variant of a (5, 5, 5) sample: float32's max, -max, 1e30 and
    -1e30 in every third element."""
    x = torch.rand(5, 5, 5, generator=torch.Generator().manual_seed(0)) * 2 - 1
    flat = x.reshape(-1)
    fmax = torch.finfo(torch.float32).max
    for n, j in enumerate(range(0, flat.numel(), 3)):
        flat[j] = (fmax, -fmax, 1e30, -1e30)[n % 4]
    return x


def test_variance_of_huge_values() -> None:
    def variances(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.var(x), torch.std(x), *torch.var_mean(x), *torch.std_mean(x),
                torch.var(x, dim=(0, 2), correction=0))

    torch_compile_matches_eager(variances, _big())


def test_vector_norm_over_dims_of_size_one_at_the_max() -> None:
    def at_max(dtype: torch.dtype) -> torch.Tensor:
        x = torch.full((2, 1, 3), torch.finfo(dtype).max, dtype=dtype)
        x[0, 0, 1], x[1, 0, 2] = NAN, -0.0
        return x

    def norms(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(y for x in xs for y in (
            torch.linalg.vector_norm(x[0, 0, 0], ord=6),
            torch.linalg.vector_norm(x, dim=1),
            torch.linalg.vector_norm(x, ord=0, dim=-2, keepdim=True),
            torch.linalg.vector_norm(x[:1, :, :1], dtype=torch.float64),
            torch.masked.norm(x[0, 0, 0], 2.0)))

    torch_compile_matches_eager(norms, *(at_max(d) for d in (torch.float32, *HALF)))
