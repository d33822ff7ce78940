"""float -> uint16 / uint32 / uint64 casts: eager's bits, or refused and run eagerly.

Eager's float -> uint32 gives different bits for NaN, infinities and out-of-range values
in its vectorised loop and in its scalar tail (decomp_uint_casts.py), so such a graph is
refused (``float-to-uint32``); before, the interpreter saturated and returned neither.
uint16 / uint64 are refused by the lowering. Integer -> uint32 is compiled, and exact.
"""

from __future__ import annotations

import pytest
import torch

from tests.compiler.exact import matches_eager, torch_compile_matches_eager
from torchneuron.compiler import CompileError, compile_graph

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
SPECIAL = [float("nan"), float("inf"), -float("inf"), -1.0, -0.5, -0.0, 1.5, 2.5, -1.5,
           -2.0 ** 31, -3e9, 2.0 ** 31, 2.0 ** 32 - 1, 2.0 ** 32, 5e9, 1e19, 2.0 ** 63,
           2.0 ** 64, 65535.5, 65536.0, 70000.0, -70000.0, 3e38]


def _values(dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(SPECIAL * 3, dtype=torch.float64).to(dtype)  # vector body and tail


def test_eager_float_to_uint32_depends_on_the_loop() -> None:
    """Why the cast is refused: the same value converts differently by position."""
    x = torch.tensor([float("nan"), -3e9, 5e9] * 6, dtype=torch.float32)
    in_block, alone = x.to(torch.uint32)[:3], torch.stack([v.reshape(1).to(torch.uint32)[0]
                                                            for v in x[:3]])
    assert not torch.equal(in_block, alone)


@pytest.mark.parametrize("target", (torch.uint16, torch.uint32, torch.uint64), ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_to_wide_unsigned_is_exact_or_refused(dtype: torch.dtype,
                                                     target: torch.dtype) -> None:
    x = _values(dtype)
    for fn in (lambda a: a.to(target), lambda a: (a * 2).to(target) if target != torch.uint16
               else a.to(target)):
        matches_eager(fn, x, refused_ok=True)
        matches_eager(fn, x[:5].clone(), refused_ok=True)


@pytest.mark.same_on_every_cpu
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_to_uint32_is_refused_with_its_reason(dtype: torch.dtype) -> None:
    with pytest.raises(CompileError) as info:
        compile_graph(lambda a: a.to(torch.uint32) + 1, [_values(dtype)])
    assert info.value.reason == "float-to-uint32" and info.value.stage == "prepare"


@pytest.mark.same_on_every_cpu
def test_copy_of_floats_into_uint32_input_is_refused() -> None:
    u = torch.zeros(len(SPECIAL), dtype=torch.uint32)
    f = torch.tensor(SPECIAL, dtype=torch.float32)
    with pytest.raises(CompileError, match="uint32"):
        compile_graph(lambda a, b: a.copy_(b), [u, f])


def test_int_to_uint32_compiles_exactly() -> None:
    x = torch.tensor([-1, -2 ** 31, 2 ** 32, 2 ** 40 + 7, 5, -3_000_000_000] * 5, dtype=torch.int64)
    matches_eager(lambda a: (a.to(torch.uint32), a.int().to(torch.uint32)), x)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16), ids=str)
def test_torch_compile_float_to_uint32_gives_eagers_bits(dtype: torch.dtype) -> None:
    x = _values(dtype)
    torch_compile_matches_eager(lambda a: (a * 2).to(torch.uint32), x)
    torch_compile_matches_eager(lambda a: (a.to(torch.uint64), a.to(torch.uint16)), x)
