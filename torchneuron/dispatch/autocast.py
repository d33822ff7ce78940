"""``torch.autocast("neuron", dtype=...)``: PyTorch's accelerator autocast policy for neuron.

Why: ``torch.autocast`` on a PrivateUse1 device puts the ``AutocastPrivateUse1`` key in
front of every op on the device's tensors, and PyTorch registers nothing for that key,
so every op failed (``Could not run 'aten::matmul' ... 'Autocastneuron' backend``). A
backend supplies the kernels itself. These are Python kernels with the cast policies
of PyTorch's accelerator autocast (the op lists CUDA, XPU and MPS share,
``AT_FORALL_*`` in ATen's ``autocast_mode.h``):

- ``lower_precision_fp``: matmuls, linears, convolutions, RNN cells, attention run in
  the autocast dtype (bf16 or fp16);
- ``fp32``: pointwise ops prone to overflow, norms and losses run in float32;
- ``fp32_set_opt_dtype``: reductions and softmax accumulate and return float32;
- ``fp32_append_dtype``: ``norm`` gets ``dtype=float32``;
- ``promote``: ops mixing inputs run in their widest floating type;
- ``binary_cross_entropy`` is refused with PyTorch's message.

Only neuron tensors of a floating dtype other than float64 are cast (PyTorch's
eligibility rule); casts are ordinary device ops (``_to_copy``), so the cost model
sees the casts and the bf16 matmuls. As in PyTorch, casts of float32 leaf tensors that
require grad (weights) are cached until the outermost autocast region exits.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

__all__ = ["POLICIES", "install"]

aten = torch.ops.aten
_KEY = torch._C.DispatchKey.AutocastPrivateUse1

_LOWER_PRECISION_FP = (
    "_convolution.deprecated _convolution conv1d conv2d conv3d conv_tbc conv_transpose1d "
    "conv_transpose2d.input conv_transpose3d.input convolution prelu addmm addmv addr matmul "
    "einsum mm mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul linalg_multi_dot "
    "_thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell "
    "rnn_relu_cell _scaled_dot_product_flash_attention scaled_dot_product_attention"
)
_FP32 = (
    "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan "
    "pow.Tensor_Scalar pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm "
    "group_norm rms_norm frobenius_norm.dim nuclear_norm nuclear_norm.dim cosine_similarity "
    "poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div "
    "l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss multilabel_margin_loss "
    "soft_margin_loss triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits "
    "dist pdist cdist renorm logsumexp upsample_nearest1d _upsample_nearest_exact1d "
    "upsample_nearest2d _upsample_nearest_exact2d upsample_nearest3d _upsample_nearest_exact3d "
    "upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa upsample_trilinear3d "
    "upsample_bicubic2d _upsample_bicubic2d_aa"
)
_FP32_SET_OPT_DTYPE = (
    "prod prod.dim_int softmax.int log_softmax.int cumprod cumsum linalg_vector_norm "
    "linalg_matrix_norm linalg_matrix_norm.str_ord sum sum.dim_IntList"
)
_FP32_APPEND_DTYPE = "norm.Scalar norm.ScalarOpt_dim"
_PROMOTE = (
    "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add"
)
_BANNED = "binary_cross_entropy"

# op name (with overload) -> cast policy
POLICIES: dict[str, str] = {
    **dict.fromkeys(_LOWER_PRECISION_FP.split(), "lower_precision_fp"),
    **dict.fromkeys(_FP32.split(), "fp32"),
    **dict.fromkeys(_FP32_SET_OPT_DTYPE.split(), "fp32_set_opt_dtype"),
    **dict.fromkeys(_FP32_APPEND_DTYPE.split(), "fp32_append_dtype"),
    **dict.fromkeys(_PROMOTE.split(), "promote"),
    **dict.fromkeys(_BANNED.split(), "banned"),
}

_lib: torch.library.Library | None = None
# id(source) -> (weakref to source, its cast); see ``_cast``
_cache: dict[int, tuple[weakref.ref, torch.Tensor]] = {}


def _eligible(t: Any) -> bool:
    return (
        isinstance(t, torch.Tensor) and t.device.type == "neuron"
        and t.is_floating_point() and t.dtype is not torch.float64
    )  # fmt: skip


def _cast(v: Any, dtype: torch.dtype) -> Any:
    """``v`` with its eligible tensors (also inside lists) cast to ``dtype``."""
    if isinstance(v, (list, tuple)):
        return type(v)(_cast(x, dtype) for x in v)
    if not _eligible(v) or v.dtype is dtype:
        return v
    cacheable = (
        dtype is torch.get_autocast_dtype("neuron") and v.dtype is torch.float32
        and v.requires_grad and v.is_leaf and not v._is_view()
        and torch.is_autocast_cache_enabled()
    )  # fmt: skip
    if not cacheable:
        return v.to(dtype)
    hit = _cache.get(id(v))
    if hit is not None and hit[0]() is v and hit[1].dtype is dtype:
        return hit[1]
    out = v.to(dtype)
    _cache[id(v)] = (weakref.ref(v), out)
    return out


def _first_tensor(args: tuple) -> Any:
    return next((a for a in args if isinstance(a, torch.Tensor)), None)


def _promote_type(args: tuple, kwargs: dict) -> torch.dtype:
    lower = torch.get_autocast_dtype("neuron")
    current = lower
    flat = [*args, *kwargs.values()]
    for a in [x for v in flat for x in (v if isinstance(v, (list, tuple)) else [v])]:
        if not _eligible(a):
            continue
        if current is torch.float32 or a.dtype is torch.float32:
            current = torch.float32
        elif a.dtype is not lower:
            raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
    return current


def _with_float_dtype(op: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Set the op's optional ``dtype`` argument to float32 unless the caller gave one."""
    names = [a.name for a in op._schema.arguments]
    i = names.index("dtype")
    if i < len(args):
        if args[i] is None:
            args = (*args[:i], torch.float32, *args[i + 1 :])
    elif kwargs.get("dtype") is None:
        kwargs = {**kwargs, "dtype": torch.float32}
    return args, kwargs


def _norm_with_float_dtype(op: Any, args: tuple, kwargs: dict) -> tuple[Any, tuple, dict]:
    """``norm.Scalar`` / ``norm.ScalarOpt_dim`` as their ``*_dtype`` overloads, dtype=float32
    (the ``*_dtype`` overloads take every argument explicitly)."""
    kwargs = {**kwargs, "dtype": torch.float32}
    if op is aten.norm.Scalar:
        if len(args) < 2:
            args = (args[0], kwargs.pop("p", 2))
        return aten.norm.ScalarOpt_dtype, args, kwargs
    if len(args) < 4:
        args = (*args, kwargs.pop("keepdim", False))
    return aten.norm.ScalarOpt_dim_dtype, args, kwargs


_BCE_MESSAGE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast."
)


def _kernel(op: Any, policy: str) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if policy == "banned":
            raise RuntimeError(_BCE_MESSAGE)
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
            target = op
            if policy == "lower_precision_fp":
                dtype = torch.get_autocast_dtype("neuron")
                args, kwargs = _cast(args, dtype), _cast(kwargs, dtype)
            elif policy == "fp32":
                args, kwargs = _cast(args, torch.float32), _cast(kwargs, torch.float32)
            elif policy == "promote":
                dtype = _promote_type(args, kwargs)
                args, kwargs = _cast(args, dtype), _cast(kwargs, dtype)
            elif _eligible(_first_tensor(args)):
                if policy == "fp32_append_dtype":
                    target, args, kwargs = _norm_with_float_dtype(op, args, kwargs)
                else:  # fp32_set_opt_dtype
                    args, kwargs = _with_float_dtype(op, args, kwargs)
            return target(*args, **kwargs)

    return kernel


def _overload(name: str) -> Any:
    base, _, overload = name.partition(".")
    return getattr(getattr(aten, base), overload or "default")


def _clear_cache_too(clear: Any) -> Any:
    def clear_autocast_cache() -> None:
        clear()
        _cache.clear()

    return clear_autocast_cache


def install() -> None:
    """Register the neuron autocast kernels (idempotent)."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("_", "IMPL")
    _lib.fallback(torch.library.fallthrough_kernel, dispatch_key="AutocastPrivateUse1")
    aten_lib = torch.library.Library("aten", "IMPL")
    for name, policy in POLICIES.items():
        aten_lib.impl(name, _kernel(_overload(name), policy), "AutocastPrivateUse1")
    _lib._aten = aten_lib  # type: ignore[attr-defined]  (keep the registrations alive)
    # torch.autocast clears PyTorch's cast cache when the outermost region exits
    torch.clear_autocast_cache = _clear_cache_too(torch.clear_autocast_cache)
