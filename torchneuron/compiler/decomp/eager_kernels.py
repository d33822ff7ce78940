"""Ops compiled as a call of eager's own CPU kernel: eager's bits on every CPU.

Why: for these ops eager's bits come from a routine no lowering reproduces on every CPU.
``log_softmax`` and ``softmax`` sum a row in the order of ATen's vector loop and take
SLEEF's vector ``exp`` in the loop's body and libm's in its tail; ``erf``, ``gelu``,
``silu``, ``softplus``, ``acos``, the Bessel functions ... are SLEEF, libm or ``Math.h``
routines (Torch-MLIR expands them into polynomials of its own); ``add`` with an
``alpha``, ``lerp``, ``addcmul`` and ``tanh_backward`` are one fused multiply-add in the
AVX2 build and two roundings in the default one. Which code runs depends on the vector
width the CPU gives ATen's loops, so a lowering tuned on one machine is off in the last bits on another (the replay sweep and
the bits-per-capability tests measured 1 to 75% of float32 elements off). Refusing them
would refuse every classifier's loss (``cross_entropy`` is ``_log_softmax``) and every
GPT block (``gelu``).

So each call stays whole: its entry (the table's layer, ``decomp/eager_kernel_table``)
keeps the node, and ``prepare.custom_calls``
carries it to the program as a ``stablehlo.custom_call`` naming ``aten.<op>.<overload>``,
whose registered target (below) runs ``torch.ops.aten.<op>`` on the call's operands:
the kernel eager itself calls, equal by construction on whichever CPU runs the program.
The simulated compiler does not see an opaque kernel: the call's ``costed`` form (its
fusion kind and the vector- and scalar-engine passes per element it takes on a
NeuronCore, where the activation engine evaluates ``exp``, ``erf``, ``gelu`` ... as one
lookup pass) makes neuronc fuse and cost it as it would the op it stands for
(``neuronc/_ops.eager_cost``). The passes are assumed figures of this module.

A call that does not apply (complex values, a float argument JSON cannot hold, ``add``
with ``alpha`` 1) keeps the entry before this layer (the math refusals for complex
values). Imports ``stablehlo.custom_targets`` and torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from torchneuron.compiler.stablehlo.custom_targets import (
    CustomCallTarget,
    TargetRaised,
    register_target,
)

__all__ = ["EagerKernel", "EAGER_KERNELS", "applies", "functional_overloads", "target_name"]

aten = torch.ops.aten
Table = dict[Any, Callable[..., Any]]


@dataclass(frozen=True)
class EagerKernel:
    """Overload packets computed by eager's kernel, and how neuronc costs one call:
    ``kind`` ("elementwise" or "reduce", how it fuses) and ``vector`` / ``scalar`` passes
    per element of its largest operand or result on those engines."""

    packets: tuple[str, ...]
    kind: str
    vector: int
    scalar: int
    when: Callable[[tuple[Any, ...], dict[str, Any]], bool] | None = None
    # operands to ask eager whether it takes the call (``_empty``'s zeros by default)
    probe: Callable[[Any], Any] | None = None

    @property
    def costed(self) -> dict[str, Any]:
        return {"kind": self.kind, "vector": self.vector, "scalar": self.scalar}


def _alpha_not_one(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
    out = [a for a in args[:2] if isinstance(a, torch.Tensor)]
    return alpha != 1 and any(t.is_floating_point() for t in out)


def _input_of(at: int, dtypes: tuple[torch.dtype, ...]) -> Callable[[tuple[Any, ...],
                                                                     dict[str, Any]], bool]:
    """A call whose tensor at position ``at`` has one of ``dtypes``."""
    def when(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        return len(args) > at and isinstance(args[at], torch.Tensor) and args[at].dtype in dtypes

    return when


def _strided_float_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """A call whose first operand is a float tensor laid out other than contiguous."""
    x = args[0] if args else None
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 1 \
        and not x.is_contiguous()


def _one_dtype(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Every tensor of the call in one dtype. PyTorch's fake batch norm types a bfloat16
    input's running statistics float32 and its CPU kernel keeps their dtype: with one
    dtype the kernel's are the exact widening of the declared, with mixed ones the graph
    would round eager's float32 statistics to bfloat16. (The backward's fake and kernel
    agree on every mix.)"""
    dtypes = {a.dtype for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)}
    return len(dtypes) == 1


_POW_SHORTCUTS = (0, 1, 0.5, -0.5, -1, 2, 3, -2)  # computed by products, sqrt... (or fills)


def _pow_without_shortcut(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``pow(float tensor, number)`` that eager computes with C ``pow``: an exponent
    without one of its shortcuts (decomp/pow.py writes those out), or float16 (none)."""
    if len(args) != 2 or not isinstance(args[0], torch.Tensor) \
            or not args[0].is_floating_point() or not isinstance(args[1], (int, float)) \
            or isinstance(args[1], bool):
        return False
    return args[0].dtype == torch.float16 and args[1] not in (0, 1) \
        or args[1] not in _POW_SHORTCUTS


def _scaled_addmm(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    beta = kwargs.get("beta", args[3] if len(args) > 3 else 1)
    alpha = kwargs.get("alpha", args[4] if len(args) > 4 else 1)
    return beta != 1 or alpha != 1


def _batched_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """A call whose first operand has two dims or more."""
    return bool(args) and isinstance(args[0], torch.Tensor) and args[0].dim() >= 2


def _weighted_bag(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """A bag with ``per_sample_weights`` (position 6); without, the lowered sum is eager's.
    Not of bfloat16 rows: PyTorch's meta kernel leaves bfloat16 off FBGEMM's fast path and
    declares an ``offset2bag`` of one entry per index, where the CPU kernel takes the fast
    path and returns it empty (the run failed on the shape: the exact sweep's RUN-ERROR)."""
    weights = args[6] if len(args) > 6 else kwargs.get("per_sample_weights")
    return isinstance(weights, torch.Tensor) and not (
        isinstance(args[0], torch.Tensor) and args[0].dtype == torch.bfloat16)


def _lapack_probe(v: Any) -> Any:
    """``_empty``'s tensors, but square float matrices as identities and integer vectors
    as pivots that swap nothing (1, 2, ... n): a solve or ``cholesky`` of zeros raises
    (not positive-definite, pivots below 1), which read as "eager does not take these
    dtypes" and left ``torch.cholesky(upper=True)``, ``lu_solve`` and ``linalg.solve``
    to lowerings off in the last bits."""
    if isinstance(v, torch.Tensor) and v.numel() <= _PROBE_ELEMENTS:
        if v.is_floating_point() and v.dim() >= 2 and v.shape[-1] == v.shape[-2]:
            return torch.eye(v.shape[-1], dtype=v.dtype).expand(v.shape).clone()
        if not v.is_floating_point() and v.dim() >= 1 and not v.is_complex():
            pivots = torch.arange(1, v.shape[-1] + 1).to(v.dtype)
            return pivots.expand(v.shape).clone()
    return [_lapack_probe(x) for x in v] if isinstance(v, (list, tuple)) else _empty(v)


def _small_probe(v: Any) -> Any:
    """Zeros of every dim capped at 3 (a grid sampler's batch, channels, sizes and its
    grid's 3 coordinates stay consistent): ``_empty``'s empty stand-in for a large input
    has no spatial size, which the grid sampler rejects, and the call would have kept a
    lowering (a float16 (20, 21, 22, 23, 24) input was a MISMATCH)."""
    if isinstance(v, torch.Tensor):
        return torch.zeros([min(d, 3) for d in v.shape], dtype=v.dtype)
    return [_small_probe(x) for x in v] if isinstance(v, (list, tuple)) else v


def _no_dropout(at: int) -> Callable[[tuple[Any, ...], dict[str, Any]], bool]:
    """A call whose ``dropout_p`` (at position ``at``) is 0: it draws nothing."""
    def when(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        p = args[at] if len(args) > at else kwargs.get("dropout_p", 0.0)
        return p == 0.0

    return when


_HALVES = (torch.float16, torch.bfloat16)
_WIDE = (torch.float32, torch.float64)
_UPSAMPLE = tuple(f"{name}{grad}" for name in (
    "upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d", "upsample_bicubic2d",
    "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa") for grad in ("", "_backward"))

_CHEBYSHEV = tuple(f"special_{s}chebyshev_polynomial_{k}" for s in ("", "shifted_") for k in "tuvw")

EAGER_KERNELS: tuple[EagerKernel, ...] = (
    # one transcendental per element on the activation engine
    EagerKernel(("erf", "erfc", "erfinv", "special_ndtr", "special_ndtri", "special_erfcx",
                 "special_log_ndtr", "gelu", "silu", "softplus", "mish", "acos", "acosh",
                 "asin", "asinh", "atan", "atanh", "cosh", "sinh", "exp2", "log10", "log2",
                 "lgamma", "digamma", "polygamma", "mvlgamma", "i0", "special_i0e",
                 "special_i1", "special_i1e", "special_bessel_j0", "special_bessel_j1",
                 "special_bessel_y0", "special_bessel_y1", "special_airy_ai",
                 "special_modified_bessel_i0", "special_modified_bessel_i1",
                 "special_modified_bessel_k0", "special_modified_bessel_k1",
                 "special_scaled_modified_bessel_k0", "special_scaled_modified_bessel_k1",
                 "special_spherical_bessel_j0", "log_sigmoid", "log_sigmoid_forward"),
                "elementwise", vector=0, scalar=1),
    # a transcendental and the gradient's (or second operand's) product
    EagerKernel(("gelu_backward", "silu_backward", "softplus_backward", "mish_backward",
                 "log_sigmoid_backward", "xlogy", "special_xlog1py", "special_zeta",
                 "logaddexp", "special_entr"),
                "elementwise", vector=2, scalar=1),
    # polynomials of a degree given per element: a few multiply-adds
    EagerKernel(("special_hermite_polynomial_h", "special_hermite_polynomial_he", *_CHEBYSHEV),
                "elementwise", vector=4, scalar=0),
    # half-precision logit: eager rounds to the half type after each of its steps
    # (x / (1 - x), then log), where the lowering kept float32 between them (float16
    # logit(0.4700) gave -0.12024, eager -0.12079; bfloat16 off by 2 ulps); float32 lowers
    EagerKernel(("logit",), "elementwise", vector=2, scalar=1, when=_input_of(0, _HALVES)),
    # compare-and-select
    EagerKernel(("hardtanh_backward",), "elementwise", vector=2, scalar=0),
    # compare-and-select whose bits depend on the element's place in ATen's loop: the
    # scalar tail of softshrink computes ``x * 0`` (-0.0 at a negative x inside the band),
    # the vector body masks (+0.0); the shrinks' backward gives the gradient at NaN in the
    # tail and 0 in the body. Where the tail starts is the CPU's vector width (AVX2 and
    # AVX-512 differ), so only eager's own kernel gives eager's bits on every CPU.
    # hardshrink's forward with them (lowered, its bfloat16 zero needed ml_dtypes: refused)
    EagerKernel(("softshrink", "hardshrink"), "elementwise", vector=2, scalar=0),
    EagerKernel(("softshrink_backward", "hardshrink_backward"), "elementwise", vector=2,
                scalar=0),
    # a multiply-add of three operands, fused or not as the CPU's build of eager does it
    # (written out, AdamW's lerp_ and addcmul_ emulated the fused form exactly in float64:
    # 1.74x the MLP's replayed host instructions; float64 was refused where eager fuses)
    EagerKernel(("lerp", "addcmul", "tanh_backward"), "elementwise", vector=3, scalar=0),
    # ``grad * (1 - y) * y`` in ATen's order (PyTorch's decomposition multiplies
    # ``grad * (y * (1 - y))``: one ulp off in many elements, and a replayed GRU training
    # step drifted 1.5e-08 from eager): a subtract and two multiplies
    EagerKernel(("sigmoid_backward",), "elementwise", vector=3, scalar=0),
    # ``expm1`` in the vector body (SLEEF's) and in the scalar tail (libm's) of ATen's elu
    # loop, whose split is the CPU's vector width; the backward's ``exp`` alike (written
    # out, a replayed nn.ELU's outputs were off in the last bit: the replay sweep). An
    # ``expm1`` and a multiply (selu and celu are elu)
    EagerKernel(("elu", "celu", "selu"), "elementwise", vector=1, scalar=1),
    EagerKernel(("elu_backward",), "elementwise", vector=2, scalar=1),
    # Found by the replay sweep judged bit for bit (``tools/replay_sweep.py``, sweep 8):
    # losses whose ``log`` / ``exp`` are SLEEF's in the vector body of ATen's loop and
    # libm's in its tail (binary cross entropy, soft margin: 1 to 3 ulps in one of 6 to
    # 20 elements), and ``cdist``'s and ``pdist``'s distances (a 1x2x3 by 1x2x3 ``cdist`` was off by an ulp). A log or exp and a few
    # multiply-adds per element. (``binary_cross_entropy_with_logits`` never reaches this
    # table: refusals/cpu_dependent.py)
    # (binary cross entropy's entries are the exact sweep's, below)
    EagerKernel(("soft_margin_loss", "soft_margin_loss_backward"), "elementwise", vector=4,
                scalar=1),
    EagerKernel(("_cdist_forward", "_cdist_backward", "_euclidean_dist", "_pdist_forward",
                 "_pdist_backward"), "reduce", vector=3, scalar=0),
    # products over several dims at once, in the order of eager's loop over the
    # coalesced dims (the interpreter multiplies one dim at a time: a 5x5x5 ``prod`` with
    # halfway values was off by 6 ulps), and ``index_reduce``'s products and means in
    # eager's order of the indices (off by an ulp in 1 of 12 elements; its entry is the
    # exact sweep's, below)
    EagerKernel(("prod",), "reduce", vector=1, scalar=0),
    # ``x ** e`` for an exponent eager has no shortcut for (decomp/pow.py keeps those):
    # SLEEF's ``pow`` in the vector body, libm's in the tail (``F.lp_pool1d``'s
    # ``** (2/3)`` was off by an ulp in 2 of 9 elements)
    EagerKernel(("pow",), "elementwise", vector=0, scalar=2, when=_pow_without_shortcut),
    # a multiply-add: the same work as the add it is
    EagerKernel(("add", "sub"), "elementwise", vector=2, scalar=0, when=_alpha_not_one),
    # a row: max, subtract, exp, sum (and log) on the row, then the output pass
    EagerKernel(("_log_softmax", "_softmax"), "reduce", vector=4, scalar=2),
    EagerKernel(("_log_softmax_backward_data", "_softmax_backward_data"), "reduce",
                vector=4, scalar=1),
    # a row's moments in the order of eager's vector loop, then the normalization (every
    # transformer's LayerNorm: 1333 of 4096 float32 outputs differed when lowered)
    EagerKernel(("native_layer_norm",), "reduce", vector=5, scalar=1),
    EagerKernel(("native_layer_norm_backward",), "reduce", vector=8, scalar=0),
    # variance and standard deviation: a float32 reduction over every element takes the
    # mean in float32 in the order of eager's vector loop (+-3.4e38 and 1e30 overflow it
    # to inf or NaN depending on that order: eager gave NaN, the lowering inf), the others
    # Welford in double. A mean pass, the squared deviations and their sum
    EagerKernel(("var", "std", "var_mean", "std_mean"), "reduce", vector=4, scalar=0),
    # the picked log-probabilities summed: eager scales each by the negated weight, and a
    # NaN's sign survives a multiply where the lowered negation flipped it (a NaN row of
    # cross_entropy gave -NaN where eager gives +NaN)
    EagerKernel(("nll_loss_forward", "nll_loss2d_forward"), "reduce", vector=2, scalar=0),
    # the gradient scattered to the picked places (eager writes +0 at an ignored one)
    EagerKernel(("nll_loss_backward", "nll_loss2d_backward"), "elementwise", vector=2,
                scalar=0),
    # a channel's batch statistics summed in the order of eager's vector loop (lowered,
    # a CNN's running means and every gradient differed in the last bits; bfloat16's,
    # summed in float32, matched no fixed order and was refused), the normalization,
    # and in training the running statistics' update; eval mode's scale and shift too
    EagerKernel(("_native_batch_norm_legit_functional", "_native_batch_norm_legit",
                 "_native_batch_norm_legit_no_training"), "reduce", vector=6, scalar=1,
                when=_one_dtype),
    EagerKernel(("native_batch_norm_backward",), "reduce", vector=8, scalar=0),
    # linear and bicubic resizes of every float dtype (ATen's loops differ by CPU code
    # path: a float32 bilinear resize decomposed was off in 186 of 378 elements, a half
    # one depends on the path; decomp/upsample_nodes keeps them whole) and every
    # antialiased one (a filter per output pixel, as eager computes it); the backward
    # too, or training would expose a lowering. Four taps read and a weighted sum per
    # output element
    EagerKernel(_UPSAMPLE[:8], "elementwise", vector=4, scalar=0,
                when=_input_of(0, (*_HALVES, *_WIDE))),
    EagerKernel(_UPSAMPLE[8:], "elementwise", vector=6, scalar=0),
    # a norm's sum of powers in the order of eager's reduction loop (gradient clipping's
    # per-parameter norms, replayed in a region, were off by an ulp and so every clipped
    # gradient after them)
    EagerKernel(("linalg_vector_norm",), "reduce", vector=2, scalar=0),
    # CPU's flash attention, which SDPA picks on the CPU (and on the device, equal to it)
    # for float inputs without dropout: blocks of query rows against blocks of keys with
    # a running max and sum, which math attention does not round alike (a GPT's replayed
    # attention was off in the last bits). Its two products per score and the row's
    # exp, max and sum; the backward's five products
    EagerKernel(("_scaled_dot_product_flash_attention_for_cpu",), "reduce", vector=6,
                scalar=1, when=_no_dropout(3)),
    EagerKernel(("_scaled_dot_product_flash_attention_for_cpu_backward",), "reduce",
                vector=10, scalar=1, when=_no_dropout(6)),
    # Found by the exact lowering sweep (``tools/lowering_coverage.py --exact``: within
    # its tolerance, not eager's bits). Products with a vector, which eager hands to BLAS's
    # level-1/2 routines (``dot``, ``gemv``) and a lowering takes as a matrix product (an
    # ``mv`` of 5x10 by 10 was off in 4 of 5 elements); ``addmm`` scaled by ``alpha`` or
    # ``beta`` (BLAS scales inside its sum; a plain bias add is ``collapse.addmm_bias``);
    # a sum of batch products. A multiply-add per element of the larger operand
    EagerKernel(("mv", "addmv", "dot", "vdot", "addr", "addbmm"), "reduce", vector=2,
                scalar=0),
    EagerKernel(("addmm",), "reduce", vector=2, scalar=0, when=_scaled_addmm),
    # small elementwise formulas eager evaluates in its own order (``cross``'s two products
    # per component, ``logaddexp2``'s exp2 and log2)
    EagerKernel(("linalg_cross", "cross"), "elementwise", vector=3, scalar=0),
    EagerKernel(("logaddexp2",), "elementwise", vector=2, scalar=1),
    # moments of a group, pooling windows, norms of slices: sums in the order of eager's
    # loops (a group norm of 1x6x3 was off in 14 of 18 elements)
    EagerKernel(("native_group_norm",), "reduce", vector=5, scalar=1),
    EagerKernel(("native_group_norm_backward",), "reduce", vector=8, scalar=0),
    EagerKernel(("avg_pool2d", "avg_pool2d_backward", "avg_pool3d", "avg_pool3d_backward",
                 "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
                 "_adaptive_avg_pool3d", "_adaptive_avg_pool3d_backward", "renorm",
                 "multilabel_margin_loss_backward"), "reduce", vector=2, scalar=0),
    # (a 1-d input's unreduced loss is 0-d from the kernel, [1] from PyTorch's meta
    # kernel: that call keeps decomp/index's entry, which gives eager's shape)
    EagerKernel(("multilabel_margin_loss_forward",), "reduce", vector=2, scalar=0,
                when=_batched_input),
    # bilinear sampling at grid points (four taps weighted in eager's order)
    EagerKernel(("grid_sampler_2d", "grid_sampler_2d_backward"), "elementwise", vector=6,
                scalar=0),
    # LAPACK's factorizations and solves (blocked, in LAPACK's order), and the
    # determinants on its LU (decomp/lu's unrolled LU is not LAPACK's order: the exact
    # all-samples sweep's linalg.det of [3, 5, 5] was off in the last bit, slogdet and
    # logdet of 5x5 to 12x12 matrices alike)
    EagerKernel(("linalg_cholesky_ex", "cholesky", "geqrf", "linalg_lu_factor_ex", "linalg_lu",
                 "linalg_lu_solve", "lu_solve", "triangular_solve", "linalg_solve_triangular",
                 "ormqr", "linalg_householder_product", "linalg_qr", "linalg_inv_ex",
                 "cholesky_solve", "cholesky_inverse", "linalg_solve_ex", "_linalg_solve_ex",
                 "_linalg_det", "linalg_det", "_linalg_slogdet", "linalg_slogdet"),
                "reduce", vector=8, scalar=0, probe=_lapack_probe),
    # Found by the sweep after them: ``bilinear``'s sum of products (``_trilinear``, in
    # eager's order: 2 of 5 elements off); an embedding bag with per-sample weights (each
    # row scaled and summed in eager's loop: 1 of 10 off)
    EagerKernel(("_trilinear",), "reduce", vector=2, scalar=0),
    EagerKernel(("_embedding_bag", "_embedding_bag_forward_only"), "reduce", vector=2,
                scalar=0, when=_weighted_bag),
    # a sample's margins summed in eager's scalar loop, the batch's mean after (PyTorch's
    # decomposition sums a (3, 4) input with ATen's reduction, whose order is the
    # vector width's: at ATEN_CPU_CAPABILITY=default a replayed region was one ulp off)
    EagerKernel(("multi_margin_loss", "multi_margin_loss_backward"), "reduce", vector=2,
                scalar=0),
    # Found by the exact sweep in float16 and bfloat16: half-precision losses, which
    # eager rounds in places of its own (smooth_l1, huber, mse and binary cross-entropy
    # compute an element in float32 and round once; soft_margin_loss and the logits' BCE
    # round after each step, so float16 exp(-x * y) overflows to inf) that PyTorch's
    # decompositions do not follow (float16 soft margin gave 7.6 where eager gives inf and
    # the logits' BCE was 0.0012 off, MISMATCHes; the others 1 ulp), then the mean of a
    # half tensor as eager takes it. The loss's formula and its sum per element; the
    # gradients' few multiply-adds (soft margin's entries, every dtype, are above)
    EagerKernel(("smooth_l1_loss", "huber_loss", "mse_loss",
                 "binary_cross_entropy_with_logits"), "reduce", vector=3, scalar=1,
                when=_input_of(0, _HALVES)),
    EagerKernel(("smooth_l1_loss_backward", "huber_loss_backward", "mse_loss_backward"),
                "elementwise", vector=3, scalar=1, when=_input_of(1, _HALVES)),
    # the probabilities' binary cross-entropy of every float dtype: its kernel is a scalar
    # loop of libm's log and log1p (not the vector loop's), which no lowering reproduces
    # (float32 with a weight: elements off in the last bit)
    EagerKernel(("binary_cross_entropy",), "reduce", vector=3, scalar=2),
    EagerKernel(("binary_cross_entropy_backward",), "elementwise", vector=3, scalar=0),
    # index reductions, which eager folds into the output one source row at a time in
    # index order (the lowering's dense form, another order: float32 mean and prod off in
    # the last bit, float16 by an ulp of the result, MISMATCHes), and float16 3-d grid
    # sampling, whose lowering (exact in float32) was off by up to 1.6 in 7070 of 554400
    # elements. A multiply-add per element; the eight corners' weights
    EagerKernel(("index_reduce",), "reduce", vector=2, scalar=0),
    # a sum or mean of a strided operand (channels-last, stepped, transposed): eager's
    # loop sums in the order of its strides, which the program's reduce of the
    # materialized values does not follow (a channels-last sum over (0, 2, 3) was off in 5
    # of 6 sums, a channels-last mse_loss's mean and a BatchNorm's weight gradient in
    # training off in the last bit). One pass per element
    EagerKernel(("sum", "mean"), "reduce", vector=1, scalar=0, when=_strided_float_input),
    EagerKernel(("grid_sampler_3d", "grid_sampler_3d_backward"), "elementwise", vector=10,
                scalar=0, when=_input_of(0, _HALVES), probe=_small_probe),
    # selections whose order among equal values is eager's algorithm's (``topk``'s partial
    # sort, ``kthvalue``'s selection, an unstable ``sort``), not the values' positions: no
    # lowering reproduces it (decomp/refusals/tie_order refused them, so a top-k sampling
    # loop ran ``topk`` between regions). A stable sort too: the stable entry lowered it
    # as ``sort.default``, which is now this kernel (unstable). And what picks an index
    # among tied values with eager's selection: ``median`` / ``nanmedian`` along a dim
    # (decomp/reductions sorts, and the sort's tie order is not the median's: the index
    # differed) and ``mode``. A sorting network's compare-and-swap passes per element
    # (assumed)
    EagerKernel(("topk", "kthvalue", "sort", "median", "nanmedian", "mode"), "reduce", vector=8,
                scalar=0),
)


def target_name(op: Any) -> str:
    """``aten._log_softmax.default``: the custom-call target of an overload."""
    return f"aten.{op.__name__}" if "." in op.__name__ else f"aten.{op.__name__}.default"


def _real(v: Any) -> bool:
    """Tensors of real dtypes, finite floats and JSON-able scalars only (what a custom
    call's operands and config can hold)."""
    if isinstance(v, torch.Tensor):
        return not v.is_complex()
    if isinstance(v, (list, tuple)):
        return all(_real(x) for x in v)
    if isinstance(v, float):
        return math.isfinite(v)
    return v is None or isinstance(v, (bool, int, str, torch.dtype))


def applies(kernel: EagerKernel, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
             ) -> bool:
    if not (_real(list(args)) and _real(list(kwargs.values()))):
        return False
    if not any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values())):
        return False
    if kernel.when is not None and not kernel.when(args, kwargs):
        return False
    return _eager_runs(op, args, kwargs, kernel.probe or _empty)


_RUNS: dict[str, bool] = {}


def _eager_runs(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                probe: Callable[[Any], Any]) -> bool:
    """Whether eager's kernel takes these dtypes (the Bessel functions have no float16
    kernel: such a call keeps the entry before, and eager's error): asked once per
    signature, on ``probe``'s tensors of the same dtypes and shapes, outside any trace."""
    from torch.utils._python_dispatch import _disable_current_modes

    key = repr((op, [(a.dtype, tuple(a.shape)) if isinstance(a, torch.Tensor) else a for a in args],
                sorted(kwargs.items(), key=lambda kv: kv[0])))
    if key not in _RUNS:
        with _disable_current_modes():
            try:
                op(*[probe(a) for a in args], **{k: probe(v) for k, v in kwargs.items()})
                _RUNS[key] = True
            except (NotImplementedError, RuntimeError, TypeError, ValueError, IndexError):
                _RUNS[key] = False
    return _RUNS[key]


def functional_overloads(packet: str) -> list[Any]:
    """The functional overloads of ``packet`` returning only tensors (in-place and
    mutating ones never reach prepare: functionalization rewrote them; ``.out`` ones
    can, from a region's graph: ``_out_entry``)."""
    op = getattr(aten, packet)
    found = []
    for name in op.overloads():
        func = getattr(op, name)
        schema = func._schema
        if any(a.is_out or (a.alias_info is not None and a.alias_info.is_write)
               for a in schema.arguments) or schema.name.endswith("_"):
            continue  # (``_native_batch_norm_legit`` writes its running statistics)
        returns = [str(r.type) for r in schema.returns]
        if returns and all(r == "Tensor" for r in returns):
            found.append(func)
    return found


def _value(v: Any) -> Any:
    """A config argument as the op takes it (``{"dtype": "float32"}`` -> torch.float32)."""
    if isinstance(v, dict):  # (an executable is data: only a dtype's name is read here)
        dtype = getattr(torch, str(v.get("dtype")), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"a custom call's argument {v!r} is not a dtype")
        return dtype
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v


# ops whose fake gives a tensor for outputs their output_mask (at this position) may
# leave out, where the kernel gives None: the carrier declares those, so the call
# computes them too (a BatchNorm on an input that needs no gradient failed its replay:
# 2 outputs for 3 declared); the mask's other entries are the fake's as they are (a
# BatchNorm without affine parameters declares the input's gradient only: computing
# all three failed the same way, 3 for 1)
_FAKE_GIVES_MASKED = {aten.native_batch_norm_backward.default: (9, (0,))}


def _run(op: Any) -> Callable[[list[Any], dict[str, Any]], tuple[Any, int, list[Any]]]:
    at, always = _FAKE_GIVES_MASKED.get(op, (-1, ()))

    def run(args: list[Any], kwargs: dict[str, Any]) -> tuple[Any, int, list[Any]]:
        if always and len(args) > at:
            args = list(args)  # the outputs the fake always declares (unused ones too)
            args[at] = [bool(m) or i in always for i, m in enumerate(args[at])]
        try:
            out = op(*[_value(a) for a in args], **{k: _value(v) for k, v in kwargs.items()})
        except (IndexError, RuntimeError, ValueError) as e:  # eager's error, for the user
            raise TargetRaised(e) from e
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        return [o for o in outs if o is not None], 0, []  # (a masked gradient is not carried)

    return run


def _empty(v: Any) -> Any:
    """Tensors as zeros of the same dtype and shape (values unread but for indices; a huge
    one as an empty one of its rank, for ops whose shape checks allow it)."""
    if isinstance(v, torch.Tensor):
        shape = list(v.shape) if v.numel() <= _PROBE_ELEMENTS else [0] * v.dim()
        return torch.zeros(shape, dtype=v.dtype)  # (zeros: an index must be in range)
    return [_empty(x) for x in v] if isinstance(v, (list, tuple)) else v


_PROBE_ELEMENTS = 1 << 20


def _register(kernel: EagerKernel, op: Any) -> None:
    def carry_if(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        return applies(kernel, op, args, kwargs)

    register_target(CustomCallTarget(target_name(op), _run(op), plan=None, op=op,
                                     costed=kernel.costed, carry_if=carry_if))


for _kernel in EAGER_KERNELS:
    for _packet in _kernel.packets:
        for _op in functional_overloads(_packet):
            _register(_kernel, _op)
