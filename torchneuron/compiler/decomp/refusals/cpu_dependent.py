"""Ops refused because eager's own bits depend on the CPU's code path, not on the graph.

Each op here was a known wrong number of the compiler (issue 22). For each, eager's CPU
result depends on where an element sits in ATen's loop (a vectorised block or the scalar
tail) or on the vector width the CPU gives those loops (8 floats with AVX2, 16 with
AVX-512), so a lowering tuned to the machine it was written on would be wrong on
another (``hardtanh_backward`` at NaN, refused here before, and the elementwise math
now run eager's own kernel inside the program: ``decomp/eager_kernels``). They are refused with a typed reason and the region runs eagerly, which is
eager's result on every CPU by construction:

- bfloat16 batch norm in training: ATen sums the batch statistics of bfloat16 input in
  float32 in vector-width order, and its ``save_invstd`` and output differ from every
  fixed-order computation tried (float64 statistics, rounded or not to bfloat16; the
  output then 0 to 1741 of 10,590 elements off). float16 keeps its exact entry
  (``decomp.halves.half_batch_norm``).
- oneDNN's LSTM layer (``mkldnn_rnn_layer`` and its backward, which ``nn.LSTM`` on
  the device calls where the CPU does: ``dispatch/lstm.py``): its bits are oneDNN's
  fused kernel, which oneDNN picks by CPU (``ONEDNN_MAX_CPU_ISA``), and the forward
  hands the backward a workspace whose layout and size are the host oneDNN's (PyTorch's
  fake says 0 bytes; the kernel gives thousands), so no program can carry it. A region
  holding either runs eagerly, and the op between regions from then on.
- ``binary_cross_entropy_with_logits`` under adaptive eager: the trace decomposes it
  before our table is asked, so eager's kernel cannot stay in the program; the runtime
  runs it between regions from the start.
- a bfloat16 embedding bag with per-sample weights: eager scales and sums the rows in
  float32 and rounds once (FBGEMM's path), the decomposition in bfloat16 steps (3 of 10
  elements off, 3 ulps, where Torch-MLIR lowered it: in-process at avx2); its eager
  kernel cannot stay in the program (PyTorch's meta kernel declares another
  ``offset2bag`` than the CPU kernel returns: ``decomp/eager_kernels._weighted_bag``).
  Without weights, a sum or mean on that path (no ``padding_idx``, rows contiguous) too:
  FBGEMM's float32 sums are not a row-by-row sum in index order (that sum rounded once
  was 2 of 32 elements off, the decomposition 13 of 37 samples off in the exact sweep
  once ``ml_dtypes`` let Torch-MLIR lower it), and FBGEMM generates its kernel for the
  CPU. With a ``padding_idx`` ATen's own loop sums in index order in float32, as the
  decomposition does.
``native_layer_norm`` over one element and half-precision linear resizes were refused here
too (their bits differ between CPU code paths); they are eager's own kernels now
(``decomp/eager_kernels``).

While AOTAutograd traces (``torch.compile``) a raise would escape to the user, so the
entry returns NotImplemented there: the op stays a node and prepare's own trace refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.refusals import math_bits
from torchneuron.compiler.errors import PrepareError

__all__ = ["ALWAYS_REFUSED", "cpu_dependent_decompositions", "REFUSED_REASONS"]

aten = torch.ops.aten
REFUSED_REASONS = ("batch-norm-bfloat16", "onednn-rnn-layer", "loss-decomposed-early",
                   "bfloat16-weighted-bag", "bfloat16-bag-sum", *math_bits.REFUSED_REASONS)
# embedding bags -> position of ``padding_idx`` (None: the overload has none, -1); each
# takes ``mode`` at 4 and ``per_sample_weights`` at 6
_BAGS = {aten._embedding_bag.default: 8, aten._embedding_bag_forward_only.default: 8,
         aten.embedding_bag.default: None, aten.embedding_bag.padding_idx: 8}
_ONEDNN_RNN = (aten.mkldnn_rnn_layer.default, aten.mkldnn_rnn_layer_backward.default)
# a loss that the trace decomposes before the decomposition table is asked (functorch's
# own kernel under ``functionalize``), so eager's kernel cannot be kept in the program
# (decomp/eager_kernels): its decomposition rounds elsewhere than eager's kernel (a
# replayed ``F.binary_cross_entropy_with_logits`` with a weight was off in the last bit
# in 14 of 50 elements: the replay sweep, sweep 8)
_DECOMPOSED_EARLY = (aten.binary_cross_entropy_with_logits.default,)
# overloads refused in every call whatever the graph -> their reason (adaptive eager runs
# them between regions from the start, not after a region holding them failed)
ALWAYS_REFUSED = {**dict.fromkeys(_ONEDNN_RNN, "onednn-rnn-layer"),
                  **dict.fromkeys(_DECOMPOSED_EARLY, "loss-decomposed-early")}

_BATCH_NORM = {  # op -> position of ``training`` (None: always training)
    aten._native_batch_norm_legit.default: 5,
    aten._native_batch_norm_legit.no_stats: 3,
    aten._native_batch_norm_legit_functional.default: 5,
    aten.native_batch_norm.default: 5,
}
def _tracing() -> bool:
    return torch._guards.TracingContext.try_get() is not None


def _refuse(op: Any, why: str, reason: str) -> Any:
    if _tracing():
        return NotImplemented
    name = f"aten.{op.__name__.split('.')[0]}"
    raise PrepareError(f"{name}: {why}, so no lowering gives eager's bits on every CPU; "
                       "this region runs eagerly.", op=name, reason=reason)


def _batch_norm(op: Any, base: Callable[..., Any] | None) -> Callable[..., Any]:
    at = _BATCH_NORM[op]

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        x = args[0]
        training = args[at] if len(args) > at else kwargs.get("training", True)
        if x.dtype == torch.bfloat16 and training:
            return _refuse(op, "eager sums bfloat16 batch statistics in float32 in the "
                           "order of its vector loop", "batch-norm-bfloat16")
        return base(*args, **kwargs) if base is not None else NotImplemented

    return decomposition


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], at: int, name: str,
         default: Any) -> Any:
    return args[at] if len(args) > at else kwargs.get(name, default)


def _bag(op: Any, base: Callable[..., Any] | None) -> Callable[..., Any]:
    pad_at = _BAGS[op]

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        weight = args[0]
        if weight.dtype != torch.bfloat16:
            return base(*args, **kwargs) if base is not None else NotImplemented
        if isinstance(_arg(args, kwargs, 6, "per_sample_weights", None), torch.Tensor):
            return _refuse(op, "eager scales and sums a bfloat16 bag's weighted rows in "
                           "float32 with FBGEMM", "bfloat16-weighted-bag")
        pad = -1 if pad_at is None else _arg(args, kwargs, pad_at, "padding_idx", -1)
        fast = (pad is None or pad < 0) and weight.dim() == 2 and weight.stride(1) == 1
        if fast and _arg(args, kwargs, 4, "mode", 0) != 2:  # a sum or mean, not a max
            return _refuse(op, "eager sums a bfloat16 bag's rows in float32 with FBGEMM, "
                           "whose order of additions is its own", "bfloat16-bag-sum")
        return base(*args, **kwargs) if base is not None else NotImplemented

    return decomposition


def _onednn_rnn(op: Any) -> Callable[..., Any]:
    def decomposition(*args: Any, **kwargs: Any) -> Any:
        return _refuse(op, "oneDNN's fused LSTM layer computes eager's bits (oneDNN picks "
                       "its kernel by CPU) and hands its backward a workspace of the host "
                       "oneDNN's layout", "onednn-rnn-layer")

    return decomposition


def cpu_dependent_decompositions(base: dict[Any, Callable[..., Any]]
                                 ) -> dict[Any, Callable[..., Any]]:
    """Entries wrapping ``base``'s (the table built so far): the cases above refuse,
    everything else keeps ``base``'s entry."""
    table: dict[Any, Callable[..., Any]] = {}
    for op in _BATCH_NORM:
        table[op] = _batch_norm(op, base.get(op))
    for op in _ONEDNN_RNN:
        table[op] = _onednn_rnn(op)
    for op in _BAGS:
        table[op] = _bag(op, base.get(op))
    table.update(math_bits.math_refusals())  # elementwise math (its own module)
    return table
