"""A convolution with a bias runs as eager's own call, ``F.conv*d(x, w, b)``.

Why: Torch-MLIR lowers ``aten.convolution(x, w, b)`` as the convolution without the bias,
then ``add(conv, broadcast_in_dim(reshape(b, (C, 1, ...)), dims = [1, 2, ...]))``. Eager
adds the bias inside its kernel (oneDNN starts or finishes its float32 accumulators with
it, ATen's float64 im2col path writes the bias first and accumulates onto it), so the
separate add rounded differently: 50 to 75% of the output elements of every
``nn.Conv1d/2d/3d`` with a bias differed from eager in the last bits, float32 and float64,
and with them the loss and every gradient of a training step. Which kernel eager picks
depends on the CPU, the dtype and the shapes; calling it gives its bits.

Recognised at load time: an ``add`` whose first operand is a float convolution in torch's
layout (no lhs dilation, window reversal or batch groups; equal, non-negative low and
high pads: the convolutions ``F.conv*d`` writes) read by nothing else, and whose second is
that broadcast of a ``(C, 1, ...)`` tensor of the convolution's rank minus one over dims
``1..``. The collapsed op reads the input, the kernel and the bias and calls ``F.conv*d``
with the convolution's stride, padding, dilation and groups.

Only a convolution's own bias is taken: ``decomp/fused_bias.py`` marks it (the identity
``custom_call @torchneuron.fused_bias``, free for neuronc) and the broadcast must read that
mark. A user's own ``F.conv2d(x, w) + b.view(-1, 1, 1)`` lowers to the same ops without
it and keeps eager's two roundings (it got the fused kernel's bits before the mark).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from torchneuron.compiler.interpreter._registry import OpFn, Runner, ints
from torchneuron.compiler.interpreter.collapse.base import Body, Collapsed, _Graph, _make
from torchneuron.compiler.stablehlo._dtypes import TORCH_DTYPES
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["conv_with_bias"]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_MARK = "torchneuron.fused_bias"  # (decomp/fused_bias.py's FUSED_BIAS_TARGET: this package may not import decomp)
_FLOATS = (torch.float32, torch.float64)


def _plan(conv: Operation, channels: int) -> OpFn | None:
    """The callable computing ``conv + bias`` from (input, kernel, bias), or None."""
    dn = conv.attributes["dimension_numbers"]
    ns = len(dn["input_spatial_dimensions"])
    fn = _CONV.get(ns)
    sp = list(range(2, 2 + ns))
    dtypes = {TORCH_DTYPES.get(t.dtype) for t in (*conv.operand_types, *conv.result_types)}
    if fn is None or len(dtypes) != 1 or dtypes.pop() not in _FLOATS or not (
        (dn["input_batch_dimension"], dn["input_feature_dimension"]) == (0, 1)
        and (dn["kernel_output_feature_dimension"], dn["kernel_input_feature_dimension"]) == (0, 1)
        and (dn["output_batch_dimension"], dn["output_feature_dimension"]) == (0, 1)
        and list(dn["input_spatial_dimensions"]) == sp
        and list(dn["kernel_spatial_dimensions"]) == sp
        and list(dn["output_spatial_dimensions"]) == sp
    ):  # fmt: skip
        return None
    if int(conv.attributes.get("batch_group_count", 1)) != 1 \
            or any(conv.attributes.get("window_reversal") or []) \
            or ints(conv, "lhs_dilation", [1] * ns) != [1] * ns:
        return None
    padding = ints(conv, "padding", [0] * (2 * ns))
    low, high = padding[0::2], padding[1::2]
    if low != high or any(p < 0 for p in low) or conv.result_types[0].shape[1] != channels:
        return None
    stride = ints(conv, "window_strides", [1] * ns)
    dilation = ints(conv, "rhs_dilation", [1] * ns)
    groups = int(conv.attributes.get("feature_group_count", 1))

    def conv_bias(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x, w, b = args
        return [fn(x, w, b.reshape(channels), stride=stride, padding=low, dilation=dilation,
                   groups=groups)]

    return conv_bias


def _marked(g: _Graph, value: str) -> bool:
    """Whether the broadcast bias is a convolution's own: ``reshape`` of the
    ``torchneuron.fused_bias`` mark ``decomp/fused_bias.py`` puts on it (a user's own add of a
    reshaped tensor has no mark, and eager computes it as two roundings)."""
    reshape = g.op(value, "stablehlo.reshape")
    mark = g.op(reshape[2][0], "stablehlo.custom_call") if reshape and reshape[2] else None
    return mark is not None and mark[1].attributes.get("call_target_name") == _MARK


def conv_with_bias(g: _Graph, body: Body, at: int) -> tuple[Collapsed, list[int]] | None:
    """The convolution + bias ``add`` ending at ``body[at]`` as one op."""
    add, operands = body[at]
    if add.name != "stablehlo.add" or len(operands) != 2:
        return None
    conv = g.op(operands[0], "stablehlo.convolution")
    bc = g.op(operands[1], "stablehlo.broadcast_in_dim")
    if conv is None or bc is None or len(conv[2]) != 2 or len(bc[2]) != 1:
        return None
    rank = len(add.result_types[0].shape)
    b_shape = list(bc[1].operand_types[0].shape)
    channels = b_shape[0] if b_shape else -1
    if ints(bc[1], "broadcast_dimensions") != list(range(1, rank)) \
            or b_shape != [channels, *[1] * (rank - 2)] or channels < 1 \
            or bc[1].operand_types[0].dtype != add.result_types[0].dtype:
        return None
    impl = _plan(conv[1], channels)
    ids = sorted([conv[0], bc[0], at])
    if impl is None or not _marked(g, bc[2][0]) or not g.closed(body, ids, at):
        return None
    outer = (conv[2][0], conv[2][1], bc[2][0])
    return _make(add, outer, [body[i] for i in ids], impl, "conv_bias"), ids
