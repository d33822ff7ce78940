"""``lerp`` in the form ATen's CPU kernel computes it, on the CPU that runs the program.

Why: AdamW updates its first moment with ``exp_avg.lerp_(grad, 1 - beta1)`` every step,
so a lerp that misses eager's last bit puts every replayed optimizer step off eager's.
ATen's kernel (LerpKernel.cpp, Lerp.h) computes in the dtype's opmath type (float32 for
float16 / bfloat16, the Scalar weight rounded to it):

    small = |weight| < 0.5
    coeff = weight if small else weight - 1
    base  = self if small else end
    out   = coeff * (end - self) + base            (rounded to the dtype)

Its vector body writes the last line as ``fmadd``, one rounding in the AVX2 (and wider)
build and two in the ``default`` build; its scalar loop (the tail of a run, and short
runs) writes ``self + weight * (end - self)`` / ``end - (end - self) * (1 - weight)``,
which the compiler may or may not contract. So the fused and the unfused forms are both
written here, each used only where samples of both loops (a run shorter than one vector
pair, a run of whole vectors) show this CPU's eager computes it (``host_numerics``
premises), else the op is refused (``cpu-dependent-premise``). float64 has no wider type
to emulate a fused step in: only the unfused form, under its premise. Complex and
integer inputs keep PyTorch's decomposition.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.foreach import _fma32
from torchneuron.compiler.decomp.host_numerics import (
    multiply_add_form,
    register_multiply_add,
    sample,
)
from torchneuron.compiler.decomp.registry import registrar

__all__ = ["LERP_DECOMPOSITIONS"]

aten = torch.ops.aten
LERP_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(LERP_DECOMPOSITIONS)
_HALVES = (torch.float16, torch.bfloat16)
_FLOATS = (torch.float32, torch.float64, *_HALVES)


def _to_f32(v: float) -> float:
    """``Scalar.to<float>()``: a Python number rounded once to float32."""
    return struct.unpack("f", struct.pack("f", v))[0] if abs(v) < 3.5e38 else v


def _lerp(start: torch.Tensor, end: torch.Tensor, weight: Any, fused: bool) -> torch.Tensor:
    """Eager's formula on opmath operands (``weight`` a tensor or a float)."""
    diff = end - start
    if isinstance(weight, torch.Tensor):
        small = weight.abs() < 0.5
        coeff = torch.where(small, weight, weight - 1)
        base = torch.where(small, start, end)
    else:
        small = abs(weight) < 0.5
        coeff = weight if small else weight - 1
        if start.dtype == torch.float32:  # eager subtracts in float32
            coeff = _to_f32(coeff)
        base = start if small else end
    if fused:
        return _fma32(diff, coeff, base)
    return coeff * diff + base


@_register(aten.lerp.Scalar)
def lerp_scalar(start: Any, end: Any, weight: Any) -> Any:
    if not isinstance(start, torch.Tensor) or start.dtype not in _FLOATS \
            or end.dtype != start.dtype or isinstance(weight, (complex, torch.Tensor)):
        return NotImplemented
    dtype = start.dtype
    fused = multiply_add_form("aten.lerp", dtype)
    if fused is None:
        return NotImplemented
    opmath = torch.float64 if dtype == torch.float64 else torch.float32
    w = float(weight) if opmath == torch.float64 else _to_f32(float(weight))
    return _lerp(start.to(opmath), end.to(opmath), w, fused).to(dtype)


@_register(aten.lerp.Tensor)
def lerp_tensor(start: Any, end: Any, weight: Any) -> Any:
    if not all(isinstance(t, torch.Tensor) for t in (start, end, weight)) \
            or start.dtype not in _FLOATS or end.dtype != start.dtype \
            or weight.dtype != start.dtype:
        return NotImplemented
    dtype = start.dtype
    fused = multiply_add_form("aten.lerp", dtype)
    if fused is None:
        return NotImplemented
    opmath = torch.float64 if dtype == torch.float64 else torch.float32
    a, b, w = (t.to(opmath) for t in (start, end, weight))
    return _lerp(a, b, w, fused).to(dtype)


# The premise samples: 15 elements (shorter than a pair of vectors at every width: ATen's
# scalar loop alone) and 64 (whole vector pairs at AVX2 and AVX-512 widths: the vector
# body alone), each with a small and a large weight and a tensor weight of both kinds.
_SIZES = (15, 64)
_WEIGHTS = (0.3, 0.7, -0.45)


def _operands(dtype: torch.dtype, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a, b = (sample((n,), seed, 3.0).to(dtype) for seed in (21, 22))
    w = (sample((n,), 23, 0.6)).to(dtype)
    return a, b, w


def _eager(dtype: torch.dtype) -> Callable[[], tuple[torch.Tensor, ...]]:
    def run() -> tuple[torch.Tensor, ...]:
        out = []
        for n in _SIZES:
            a, b, w = _operands(dtype, n)
            out += [torch.lerp(a, b, s) for s in _WEIGHTS] + [torch.lerp(a, b, w)]
        return tuple(out)

    return run


def _ours(dtype: torch.dtype, fused: bool) -> Callable[[], tuple[torch.Tensor, ...]]:
    opmath = torch.float64 if dtype == torch.float64 else torch.float32

    def run() -> tuple[torch.Tensor, ...]:
        out = []
        for n in _SIZES:
            a, b, w = (t.to(opmath) for t in _operands(dtype, n))
            scalars = [s if opmath == torch.float64 else _to_f32(s) for s in _WEIGHTS]
            out += [_lerp(a, b, s, fused).to(dtype) for s in scalars]
            out.append(_lerp(a, b, w, fused).to(dtype))
        return tuple(out)

    return run


register_multiply_add("aten.lerp", _FLOATS, _eager, _ours)
