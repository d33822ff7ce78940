"""The decomposition table used by ``prepare``: an ordered list of layers.

``LAYERS`` lists them in the order they apply, as ``neuronc/passes.py`` lists its
passes. Each layer is ``layer(table) -> entries``: the entries it returns replace the
table's, and a wrapping layer hands each op's previous entry to its wrapper, so an op
goes through every layer above the one that defined it. The first layer is PyTorch's
and Torch-MLIR's own tables; the second, ``own_entries``, is ours: one owner per
overload (``registry``), each family of ops in a module of its own (``_families``).

Our own entries exist because this torch-mlir cannot lower some ops that real training
graphs contain (max_pool2d_with_indices and its backward, empty_permuted from dropout,
hypot, ...), lowers them with semantics unlike ATen's CPU kernel (remainder, argmax on
NaN, ...), or lowers them in a way that crashed it (logsumexp). Random ops are never
decomposed here: ``prepare.random_ops`` lifts them out of the graph so eager's own
kernel draws them (a decomposition into rand + arithmetic would draw different numbers),
with one exception, native_dropout (``dropout``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from torch._decomp import core_aten_decompositions

from torchneuron.compiler.decomp import (
    addc,
    batch_norm_eval,
    bessel,
    cholesky,
    composites,
    conv,
    custom,
    division,
    dropout,
    eager_kernel_table,
    elementwise,
    embedding_bag,
    extremes,
    fft,
    fmod,
    foreach,
    fractional,
    fused_bias,
    host_numerics,
    index,
    lerp,
    lu,
    pad,
    polynomials,
    pool,
    pool_windows,
    pow,
    qr,
    reductions,
    relu,
    resample,
    resize,
    scans,
    shapes,
    special,
    tanh_backward,
    variance,
    views,
    zeta,
)
from torchneuron.compiler.decomp.halves import (
    half_batch_norm,
    half_log_softmax,
    half_mean,
    half_norm,
    half_scalar,
    half_var,
    opmath,
)
from torchneuron.compiler.decomp.refusals import cpu_dependent, half_conv, tie_order
from torchneuron.compiler.decomp.registry import owners
from torchneuron.compiler.prepare.index_bounds import with_index_checks
from torchneuron.compiler.prepare.random_ops import is_random_op

__all__ = ["decomposition_table", "LAYERS", "own_entries", "torch_entries"]

Table = dict[Any, Callable[..., Any]]
Layer = Callable[[Table], Table]

# Random composites that *do* need decomposing into primitive random ops.
_RANDOM_COMPOSITES_KEPT = {"rrelu", "lstm", "gru", "rnn_tanh", "rnn_relu",
                           "scaled_dot_product_attention", "native_dropout"}


# Ops this torch-mlir cannot lower for which PyTorch's *full* decomposition table (not the
# core subset) has an entry that lowers and matches eager (checked by
# tools/lowering_coverage.py). Names are overload packets; every overload is taken.
FROM_TORCH_TABLE = (
    "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d", "addmv",
    "diagonal", "diagonal_copy", "as_strided_copy", "permute_copy", "unbind_copy",
    "view_copy", "narrow_copy", "dist",
)
# Tried and rejected: refs that only forward to a prim this torch-mlir cannot lower either
# (lgamma, digamma, erfc, erfinv, i0, special_*: ours are in decomp/special.py), cumprod
# (needs prims.prod), diagonal_scatter (prims.copy_to), and unfold / unfold_copy, whose
# lowering segfaults torch-mlir.


def torch_entries(table: Table) -> Table:
    """Core aten decompositions + ``torch_mlir.fx.get_decomposition_table()`` + the
    ``FROM_TORCH_TABLE`` packets of PyTorch's full table, without primitive random ops."""
    import torch_mlir.fx as tmfx
    from torch._decomp import decomposition_table as full_table

    entries: Table = dict(core_aten_decompositions())
    entries.update(tmfx.get_decomposition_table())
    wanted = set(FROM_TORCH_TABLE)
    for op, fn in full_table.items():
        packet = getattr(op, "_overloadpacket", None)
        if packet is not None and packet.__name__ in wanted:
            entries.setdefault(op, fn)
    for op in list(entries):
        name = getattr(op, "__name__", str(op)).split(".")[0]
        if is_random_op(op) and name not in _RANDOM_COMPOSITES_KEPT:
            del entries[op]  # keep primitive random ops intact for random_ops
    return entries


def _families() -> list[Table]:
    """Every family's own table (the fused LSTM/GRU cells PyTorch picks for the device
    have no CPU kernel to trace: the device's own implementation, plain torch ops, is
    their decomposition)."""
    from torchneuron.dispatch.rnn import FUSED_CELL_KERNELS

    return [dropout.DROPOUT_DECOMPOSITIONS, pool_windows.POOL_WINDOW_DECOMPOSITIONS,
            elementwise.ELEMENTWISE_DECOMPOSITIONS, reductions.REDUCTION_DECOMPOSITIONS,
            views.VIEW_DECOMPOSITIONS, scans.CUMULATIVE_DECOMPOSITIONS,
            composites.COMPOSITE_DECOMPOSITIONS, polynomials.POLYNOMIAL_DECOMPOSITIONS,
            cholesky.CHOLESKY_DECOMPOSITIONS, variance.VARIANCE_DECOMPOSITIONS,
            conv.CONV_DECOMPOSITIONS, fused_bias.FUSED_BIAS_DECOMPOSITIONS,
            pool.POOL_DECOMPOSITIONS, pad.PAD_DECOMPOSITIONS,
            FUSED_CELL_KERNELS, fractional.FRACTIONAL_DECOMPOSITIONS,
            special.SPECIAL_DECOMPOSITIONS, lu.LU_DECOMPOSITIONS, qr.QR_DECOMPOSITIONS,
            index.INDEX_DECOMPOSITIONS, resample.RESAMPLE_DECOMPOSITIONS,
            resize.RESIZE_DECOMPOSITIONS, bessel.BESSEL_DECOMPOSITIONS,
            embedding_bag.EMBEDDING_BAG_DECOMPOSITIONS, zeta.ZETA_DECOMPOSITIONS,
            extremes.EXTREMES_DECOMPOSITIONS, division.DIVISION_DECOMPOSITIONS,
            fmod.FMOD_DECOMPOSITIONS, half_mean.HALF_MEAN_DECOMPOSITIONS,
            pow.POW_DECOMPOSITIONS, relu.RELU_DECOMPOSITIONS,
            tie_order.TIE_ORDER_DECOMPOSITIONS, addc.ADDC_DECOMPOSITIONS, lerp.LERP_DECOMPOSITIONS,
            tanh_backward.TANH_BACKWARD_DECOMPOSITIONS,
            half_scalar.HALF_SCALAR_DECOMPOSITIONS, foreach.FOREACH_DECOMPOSITIONS,
            custom.custom_op_decompositions()]


def own_entries(table: Table) -> Table:
    """Our families merged: one owner per overload (two families naming one op raise)."""
    return owners(_families())


# In the order they apply; each comment says what the layer wraps or replaces.
LAYERS: list[Layer] = [
    torch_entries,                                     # PyTorch's and Torch-MLIR's own
    own_entries,                                       # ours, one owner per overload
    batch_norm_eval.batch_norm_eval_decompositions,    # eval mode; wraps the entries before
    half_batch_norm.half_batch_norm_decompositions,    # float16 training; wraps the entries
    cpu_dependent.cpu_dependent_decompositions,        # refusals; wrap the entries before
    half_conv.half_conv_decompositions,                # halves refused; wraps the entries
    half_var.half_var_decompositions,                  # halves in float64; wraps the entries
    half_norm.half_norm_decompositions,                # halves in float32; wraps the entries
    fft.fft_decompositions,                            # complex values only; real: the entry before
    opmath.opmath_decompositions,                      # half in float32; wraps the entries before
    half_log_softmax.half_log_softmax_decompositions,  # last dim of halves: eager's roundings
    shapes.shape_decompositions,                       # wraps the entries above, so late
    eager_kernel_table.eager_kernel_decompositions,    # eager's own kernel; wraps the above
    with_index_checks,                                 # out-of-range indices raise: outermost
]


@functools.lru_cache(maxsize=1)
def decomposition_table() -> Table:
    """Every layer of ``LAYERS`` applied in order.

    Cached (built once per process); callers must not mutate it."""
    table: Table = {}
    for layer in LAYERS:
        table.update(layer(table))
    host_numerics.settle()  # the premises of the entries above, before anything traces
    return table
