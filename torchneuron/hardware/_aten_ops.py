"""Which aten ops run on which NeuronCore engine: the name tables used by ``eager_work``.

Why a separate module: the tables are data that grows with every op someone meets, while the
mapping logic in ``eager_work.py`` rarely changes. Names are aten base names without
namespace, overload or in-place suffix ("add_.Tensor" -> "add"); ``_foreach_`` ops are looked
up by the name of the op they apply to each tensor.
"""

from __future__ import annotations

# Metadata-only: no device kernel (views are detected from func.is_view as well).
_METADATA = frozenset(
    "view _unsafe_view t transpose permute expand expand_as as_strided detach alias slice "
    "select squeeze unsqueeze _reshape_alias reshape view_as unflatten flatten unbind split "
    "split_with_sizes chunk narrow diagonal movedim unfold view_as_real view_as_complex "
    "real imag conj _conj _neg_view resolve_conj resolve_neg lift_fresh _nested_view_from_buffer "
    "size sym_size stride sym_stride numel sym_numel dim storage_offset sym_storage_offset "
    "is_contiguous is_same_size empty empty_like empty_strided new_empty "
    "new_empty_strided set resize resize_as record_stream _version requires_grad "
    "retain_grad _fw_primal _make_dual _unpack_dual".split()
)
_MATMUL = frozenset("mm addmm bmm baddbmm matmul dot vdot mv addmv linear addbmm _scaled_mm".split())
_CONV = frozenset("convolution _convolution convolution_overrideable conv2d conv1d conv3d".split())
_CONV_BWD = frozenset("convolution_backward convolution_backward_overrideable".split())
_ATTENTION = frozenset(
    "scaled_dot_product_attention _scaled_dot_product_flash_attention_for_cpu "
    "_scaled_dot_product_efficient_attention _scaled_dot_product_flash_attention "
    "_scaled_dot_product_attention_math".split()
)
_REDUCTION = frozenset(
    "sum mean amax amin max min aminmax argmax argmin prod var std var_mean std_mean norm "
    "linalg_vector_norm all any count_nonzero nansum nanmean native_layer_norm layer_norm "
    "native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training "
    "_native_batch_norm_legit_functional native_group_norm native_layer_norm_backward "
    "native_batch_norm_backward native_group_norm_backward nll_loss_forward nll_loss2d_forward "
    "nll_loss_backward nll_loss2d_backward mse_loss mse_loss_backward l1_loss "
    "binary_cross_entropy binary_cross_entropy_backward smooth_l1_loss huber_loss "
    "_euclidean_dist cdist dist rms_norm _fused_rms_norm".split()
)
# Reductions that also exponentiate every element (on ScalarE).
_SOFTMAX = frozenset(
    "softmax _softmax log_softmax _log_softmax logsumexp _softmax_backward_data "
    "_log_softmax_backward_data cross_entropy_loss _safe_softmax".split()
)
_TRANSCENDENTAL = frozenset(
    "exp exp2 expm1 log log2 log10 log1p tanh sigmoid gelu silu mish erf erfc erfinv rsqrt "
    "sqrt pow sin cos tan asin acos atan atan2 sinh cosh asinh acosh atanh softplus elu selu "
    "celu logit reciprocal lgamma digamma polygamma mvlgamma i0 sinc logaddexp logaddexp2 "
    "gelu_backward silu_backward mish_backward elu_backward softplus_backward logit_backward "
    "log_sigmoid_forward log_sigmoid_backward xlogy special_xlog1py glu "
    # fused RNN cells: gate sigmoids/tanh on ScalarE, the products on VectorE
    "_thnn_fused_lstm_cell _thnn_fused_lstm_cell_backward_impl _thnn_fused_gru_cell "
    "_thnn_fused_gru_cell_backward".split()
)
_GPSIMD = frozenset(
    "gather scatter scatter_add scatter_reduce index index_put _index_put_impl index_select "
    "index_add index_copy index_fill index_reduce embedding embedding_dense_backward "
    "_embedding_bag _embedding_bag_forward_only embedding_bag sort argsort topk kthvalue median "
    "nanmedian mode cumsum cumprod cummax cummin logcumsumexp nonzero nonzero_static arange "
    "randperm masked_select masked_scatter take put put_ unique _unique _unique2 "
    "unique_consecutive unique_dim searchsorted bucketize histc bincount repeat_interleave "
    "tril_indices triu_indices multinomial uniform normal bernoulli random exponential "
    "geometric cauchy log_normal rand randn randint rand_like randn_like randint_like "
    "native_dropout linspace logspace eye max_pool2d_with_indices max_pool2d_with_indices_backward "
    "max_pool3d_with_indices grid_sampler_2d upsample_nearest2d upsample_nearest2d_backward".split()
)
_SORTING = frozenset("sort argsort topk kthvalue median nanmedian mode unique _unique2".split())
_COPY = frozenset(
    "copy _copy_from _copy_from_and_resize _to_copy clone contiguous to lift_fresh_copy cat "
    "concat concatenate stack hstack vstack repeat flip roll constant_pad_nd pad tile "
    "_unsafe_index index_put_copy expand_copy view_copy permute_copy transpose_copy "
    "t_copy slice_copy select_copy squeeze_copy unsqueeze_copy as_strided_copy alias_copy "
    "detach_copy diagonal_copy unfold_copy split_copy split_with_sizes_copy unbind_copy "
    "_reshape_copy narrow_copy slice_scatter select_scatter diagonal_scatter as_strided_scatter "
    "tril triu select_backward slice_backward diagonal_backward unfold_backward "
    "as_strided_scatter".split()
)
# Namespaces of host-side bookkeeping ops (the profiler's record_function markers).
_NO_KERNEL_NS = frozenset({"profiler"})
# Fills: VectorE writes every output element, reads nothing.
_FILL = frozenset(
    "fill zero zeros ones full zeros_like ones_like full_like scalar_tensor new_ones new_full "
    "new_zeros".split()
)
# Ops whose tensor arguments supply only metadata or a fill value (no elementwise read).
_WRITE_ONLY = frozenset(
    "fill zero zeros ones full zeros_like ones_like full_like scalar_tensor new_zeros new_ones "
    "new_full arange randperm rand randn randint rand_like randn_like randint_like uniform "
    "normal random exponential geometric cauchy log_normal linspace logspace eye".split()
)
