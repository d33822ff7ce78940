"""float -> integer casts of NaN, +-inf and out-of-range values, bit for bit with eager.

Eager CPU converts with x86's truncating instructions: NaN, +-inf and values whose
truncation does not fit give the minimum of the 32- or 64-bit type, and int16 / int8 /
uint8 wrap what the 32-bit (float64 -> uint8: 64-bit) conversion gave. The interpreter
saturated (StableHLO leaves these values implementation-defined). Inputs: every float16
and bfloat16 bit pattern; random float32 / float64 bit patterns, powers of two with their
neighbours and halves; in tensors long enough for eager's vectorised loop and short
enough for its scalar one.
"""

from __future__ import annotations

import pytest
import torch

from tests.compiler.exact import cases_match_eager, matches_eager, torch_compile_matches_eager

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)


def _values(dtype: torch.dtype) -> torch.Tensor:
    if dtype in (torch.float16, torch.bfloat16):
        return torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    g = torch.Generator().manual_seed(11)
    ibits = torch.int32 if dtype == torch.float32 else torch.int64
    info = torch.iinfo(ibits)
    bits = torch.randint(info.min, info.max, (20000,), generator=g, dtype=torch.int64)
    powers = torch.tensor([2.0 ** k for k in range(70)], dtype=dtype)
    near = torch.cat([powers, powers.nextafter(torch.tensor(0.0, dtype=dtype)),
                      powers.nextafter(torch.tensor(float("inf"), dtype=dtype)), powers - 0.5])
    return torch.cat([bits.to(ibits).view(dtype), near, -near])


@pytest.mark.parametrize("target", INTS, ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_to_int_cast_matches_eager(dtype: torch.dtype, target: torch.dtype) -> None:
    x = _values(dtype)
    cases_match_eager({"to": lambda a: a.to(target),  # both in one graph
                       "trunc-to": lambda a: (a.trunc() * 1).to(target) + 1
                       if target != torch.bool else a.trunc().to(target)}, x)
    matches_eager(lambda a: a.to(target), x[:7].clone())  # eager's scalar loop only


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_torch_compile_long_and_int_casts_match_eager(dtype: torch.dtype) -> None:
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 1e19, 2.0 ** 31,
                      300.0, -129.5, 65504.0, -0.0, 2.5], dtype=torch.float64).to(dtype)
    torch_compile_matches_eager(lambda a: (a.long(), a.trunc().int(), a.to(torch.int16),
                                           a.to(torch.uint8), (a * 3).to(torch.int8)), x)
