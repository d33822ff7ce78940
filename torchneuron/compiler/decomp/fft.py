"""FFTs refused (``eager-fft-bits``): a region holding one runs eagerly, with eager's bits.

Why: eager computes ``_fft_r2c`` / ``_fft_c2c`` / ``_fft_c2r`` (every ``torch.fft`` op and
``stft``) with pocketfft (or MKL's DFTI): a mixed-radix transform whose butterflies,
twiddle factors and their rounding are the library's own. The lowering this module held
before wrote a DFT as real matmuls by matrices of cosines and sines: within the sweep's
tolerance, but not eager's bits (``tools/lowering_coverage.py --exact`` found about half
of every transform's float32 elements off, 429 of 700 for ``fft.fft``; issue 22). No
matmul order reproduces a butterfly network's roundings, and the device has no kernel of
pocketfft's to call, so the op is refused: torch.compile runs the region eagerly, and
adaptive eager learns the op (the reason is op-intrinsic, ``math_bits.REFUSED_REASONS``)
and runs it between regions, so the arithmetic around it still compiles.

The entries keep the FFT nodes (NotImplemented) so that the refusal is raised by
``refuse_ffts`` on the traced graph (an error raised while AOTAutograd traces would fail
torch.compile instead of running eagerly); ``fft_decompositions`` is still the layer that
adds ``decomp/complex.py``'s entries (complex arithmetic as real pairs), which hand real
values to the table's earlier entry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.complex import COMPLEX_DECOMPOSITIONS, in_eager_layout
from torchneuron.compiler.errors import PrepareError

__all__ = ["FFT_OPS", "FFT_REASON", "fft_decompositions", "refuse_ffts"]

aten = torch.ops.aten
FFT_OPS = frozenset({aten._fft_r2c.default, aten._fft_c2c.default, aten._fft_c2r.default})
FFT_REASON = "eager-fft-bits"


def fft_decompositions(table: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """``COMPLEX_DECOMPOSITIONS`` for ``table``: their entries rewrite only complex values
    (returning NotImplemented on real ones), so where ``table`` already had an entry for
    the op (``sgn``, ``new_zeros``, ``slice_scatter``, ``polar``...), real values still go
    to it. The FFT ops get an entry that keeps the node, for ``refuse_ffts``."""
    out: dict[Any, Callable[..., Any]] = {}
    for op, fn in COMPLEX_DECOMPOSITIONS.items():
        fn = functools.partial(in_eager_layout, op, fn)
        prev = table.get(op)
        out[op] = fn if prev is None else functools.partial(_chained, fn, prev)
    for op in FFT_OPS:
        out[op] = _kept
    return out


def _kept(*args: Any, **kwargs: Any) -> Any:
    return NotImplemented


def refuse_ffts(gm: Any) -> None:
    """Refuse (``eager-fft-bits``) a graph that holds an FFT op."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in FFT_OPS:
            name = f"aten.{node.target.__name__.split('.')[0]}"
            raise PrepareError(
                f"{name}: eager computes FFTs with pocketfft (or MKL), whose butterflies "
                "round in an order no lowering reproduces (a DFT as matmuls was off in the "
                "last bits of about half the elements); this region runs eagerly, with "
                "eager's results.", op=name, reason=FFT_REASON)


def _chained(fn: Callable[..., Any], prev: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    r = fn(*args, **kwargs)
    return prev(*args, **kwargs) if r is NotImplemented else r
