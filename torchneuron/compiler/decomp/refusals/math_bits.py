"""Elementwise math whose eager bits no lowering reproduces: refused, run eagerly.

Why: eager computes these ops with a transcendental kernel of its own (SLEEF's vector
functions, the C library's, or ATen's scalar series in ``Math.h``), one call per element.
The lowering has no such op: Torch-MLIR expands ``acos``, ``erf``, ``lgamma`` ... into
StableHLO polynomials and identities (``acos(x) = atan2(sqrt((1 - x)(1 + x)), x)``),
PyTorch's decompositions write ``silu``, ``mish``, ``softplus``, ``logaddexp`` as chains
of ``exp`` and ``log1p``, and ``decomp/special.py`` sums series in another order. Each
differs from eager in the last bits of 5 to 75% of random float32 elements (the replay
sweep listed them as LAST-BIT, issue 22). Measured with the same inputs in processes
under ``ATEN_CPU_CAPABILITY=default`` and ``avx2``:

- ``cpu-dependent-math``: eager's own bits differ between the two (its vector body and
  its scalar tail take different code, and the compiler contracts multiply-adds in the
  AVX2 build only), so no fixed lowering matches every CPU;
- ``eager-math-bits``: eager's bits were the same under both, but they are those of a
  SLEEF, libm or ``Math.h`` routine the lowering does not reproduce (the vector width
  of AVX-512 may still change them: not measured).

For real dtypes these entries are no longer reached: ``decomp/eager_kernels`` (a later
layer) keeps each call whole and the program runs eager's own kernel for it, equal to
eager on every CPU by construction. What is left here refuses complex values (a custom
call's operands are real tensors): the region runs eagerly and adaptive eager learns
the op and runs it between regions (a layer of ``refusals.cpu_dependent``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.eager_kernels import functional_overloads
from torchneuron.compiler.errors import PrepareError

__all__ = ["math_refusals", "REFUSED_REASONS", "CPU_DEPENDENT", "CPU_DEPENDENT_FACTORIES",
           "EAGER_BITS"]

# (and decomp/fft.py's: every FFT is refused, its bits are pocketfft's butterflies')
REFUSED_REASONS = ("cpu-dependent-math", "eager-math-bits", "eager-fft-bits")

# overload packets (every overload) whose eager bits differ between default and avx2
CPU_DEPENDENT = (
    "atanh", "cosh", "sinh", "i0", "lgamma", "mvlgamma", "exp2", "log_sigmoid",
    "log_sigmoid_forward", "mish", "logaddexp",
    "special_bessel_j0", "special_bessel_j1", "special_bessel_y0", "special_bessel_y1",
    "special_airy_ai", "special_i0e", "special_i1", "special_i1e", "special_ndtri",
    "special_modified_bessel_i0", "special_modified_bessel_i1", "special_modified_bessel_k0",
    "special_modified_bessel_k1", "special_scaled_modified_bessel_k0",
    "special_scaled_modified_bessel_k1", "special_hermite_polynomial_h",
    "special_hermite_polynomial_he",
    *(f"special_{s}chebyshev_polynomial_{k}" for s in ("", "shifted_") for k in "tuvw"),
)
# factories whose bits depend on the CPU, with no operand to call eager's kernel on (the
# packets above are eager's kernels for real dtypes; these stay refused): ``linspace``
# is ``start + step * i`` in its first half and ``end - step * (steps - 1 - i)`` in its
# second, but a vector of ATen's loop takes its first lane's half for every lane and adds
# ``k * step``, so where the halves meet depends on the vector width (8 or 16 floats;
# -2 to -3 in 50 steps was off in 4 elements, the exact lowering sweep)
CPU_DEPENDENT_FACTORIES = ("linspace",)
# overload packets whose eager bits were equal under both, and are a routine's we lack
EAGER_BITS = (
    "acos", "acosh", "asin", "asinh", "atan", "erfc", "erfinv", "digamma", "polygamma",
    "log10", "log2", "xlogy", "special_erfcx", "special_log_ndtr", "special_xlog1py",
    "special_zeta", "special_spherical_bessel_j0",
)


def _tracing() -> bool:
    return torch._guards.TracingContext.try_get() is not None


def _refusal(packet: str, reason: str) -> Callable[..., Any]:
    name = f"aten.{packet}"
    if reason == "cpu-dependent-math":
        why = (f"{name}: eager's bits depend on the CPU's code path (they differ between "
               "ATEN_CPU_CAPABILITY=default and avx2), so no lowering gives them on every "
               "CPU; this region runs eagerly, with eager's results.")
    else:
        why = (f"{name}: eager computes it with a SLEEF, libm or ATen series routine whose "
               "bits the lowering's expansion does not reproduce (last-bit differences); "
               "this region runs eagerly, with eager's results.")

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        if _tracing():  # under AOTAutograd a raise escapes torch.compile: keep the node,
            return NotImplemented  # prepare's own trace of the graph refuses it
        raise PrepareError(why, op=name, reason=reason)

    return decomposition


def math_refusals() -> dict[Any, Callable[..., Any]]:
    """An entry for every overload of the packets above (they replace any entry before:
    an op that is always refused needs no decomposition)."""
    table: dict[Any, Callable[..., Any]] = {}
    for packets, reason in ((CPU_DEPENDENT, "cpu-dependent-math"),
                            (CPU_DEPENDENT_FACTORIES, "cpu-dependent-math"),
                            (EAGER_BITS, "eager-math-bits")):
        for packet in packets:
            entry = _refusal(packet, reason)
            for func in functional_overloads(packet):  # (not erfc.int: a Python number's math)
                table[func] = entry
    return table
