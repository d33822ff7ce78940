"""A convolution's weight gradient runs as eager's own kernel, ``aten.convolution_backward``.

Why: ``decomp_conv`` writes the weight gradient of ``conv(x, w)`` as a forward convolution
of the input (channels as batch, batch as channels) with the output gradient as its
kernel, stride and dilation swapped, cut to the kernel size and transposed back to the
weight's ``(out, in / groups, *k)`` layout. The generic convolution ran that as
``F.conv*d``: the same products, summed in another order than the kernel eager's
autograd calls (oneDNN's backward-weights primitive for float32, ATen's im2col and gemm
for float64), so 20 to 95% of the elements of every Conv1d/2d/3d weight gradient
differed from eager in the last bits (4411 of 4608 of a 16-to-32-channel 3x3 Conv2d).
Which kernel eager picks depends on the CPU, the dtype, the shapes and the thread
count, so no reimplementation can match it everywhere; calling it can.

Recognised at load time: a ``transpose`` swapping dims 0 and 1 of (optionally) ``slice``
ops that keep the start of each spatial dim of a float convolution in torch's layout
(``[b, f, *s] x [o, i, *s] -> [b, f, *s]``) with no lhs dilation, window reversal or batch
groups and equal low and high pads, whose input and kernel are both rearranged by
``reshape`` / ``transpose`` ops (as ``decomp_conv`` writes them; a user's convolution of
block inputs is left alone). Only the run's ``transpose`` may be read outside it. The
collapsed op reads the convolution's two operands, undoes ``decomp_conv``'s rearrangement
(exact: moves no bits) into the forward's input ``(N, C, *L)`` and output gradient
``(N, O, *T)``, and calls ``aten.convolution_backward`` for the weight only, with the
forward's stride (the convolution's ``rhs_dilation``), dilation (its window strides),
padding and groups. The weight's values do not enter the weight gradient: an empty
tensor of its shape stands for it.

A transposed convolution's weight gradient is the same convolution with the roles of
input and output gradient swapped (``decomp_conv`` writes it so, and the program does not
say which it was): it runs as the plain convolution's weight gradient of the swapped
pair, which is how oneDNN computes a deconvolution's weight gradient itself.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import OpFn, Runner, ints
from torchneuron.compiler.interpreter.collapse.base import Body, Collapsed, _Graph, _make
from torchneuron.compiler.stablehlo._dtypes import TORCH_DTYPES
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["conv_weight_grad"]

_FLOATS = (torch.float32, torch.float64)
_REARRANGE = ("stablehlo.reshape", "stablehlo.transpose")
_backward = torch.ops.aten.convolution_backward.default


def _torch_layout(conv: Operation, ns: int) -> bool:
    """Whether the convolution's operands and result are in torch's NC*/OI* layout."""
    dn = conv.attributes["dimension_numbers"]
    sp = list(range(2, 2 + ns))
    return (
        (dn["input_batch_dimension"], dn["input_feature_dimension"]) == (0, 1)
        and (dn["kernel_output_feature_dimension"], dn["kernel_input_feature_dimension"]) == (0, 1)
        and (dn["output_batch_dimension"], dn["output_feature_dimension"]) == (0, 1)
        and list(dn["input_spatial_dimensions"]) == sp
        and list(dn["kernel_spatial_dimensions"]) == sp
        and list(dn["output_spatial_dimensions"]) == sp
    )  # fmt: skip


def _plan(conv: Operation, w_shape: list[int]) -> OpFn | None:
    """The callable computing the weight gradient (of shape ``w_shape``) from the
    convolution's operands, or None."""
    ns = len(conv.attributes["dimension_numbers"]["input_spatial_dimensions"])
    dtypes = {TORCH_DTYPES.get(t.dtype) for t in (*conv.operand_types, *conv.result_types)}
    if not 1 <= ns <= 3 or len(dtypes) != 1 or dtypes.pop() not in _FLOATS \
            or not _torch_layout(conv, ns):
        return None
    groups = int(conv.attributes.get("feature_group_count", 1))
    if int(conv.attributes.get("batch_group_count", 1)) != 1 or groups < 1 \
            or any(conv.attributes.get("window_reversal") or []) \
            or ints(conv, "lhs_dilation", [1] * ns) != [1] * ns:
        return None
    padding = ints(conv, "padding", [0] * (2 * ns))
    low, high = padding[0::2], padding[1::2]
    if low != high or any(p < 0 for p in low):
        return None
    x_shape = list(conv.operand_types[0].shape)  # (C / groups, groups * N, *L)
    k_shape = list(conv.operand_types[1].shape)  # (groups * O / groups, N, *T)
    r_shape = list(conv.result_types[0].shape)  # (C / groups, O, *K), K >= ksize
    if not all(s >= 0 for s in (*x_shape, *k_shape, *r_shape)) or x_shape[1] % groups \
            or k_shape[0] % groups or x_shape[1] // groups != k_shape[1] \
            or w_shape[:2] != [r_shape[1], r_shape[0]] or len(w_shape) != len(r_shape) \
            or any(not 1 <= k <= r for k, r in zip(w_shape[2:], r_shape[2:], strict=True)):
        return None
    cg, n, o = x_shape[0], k_shape[1], k_shape[0]
    stride = ints(conv, "rhs_dilation", [1] * ns)
    dilation = ints(conv, "window_strides", [1] * ns)
    space_x, space_g = x_shape[2:], k_shape[2:]
    sp = [3 + i for i in range(ns)]
    dtype = TORCH_DTYPES[conv.result_types[0].dtype]

    def weight_grad(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        lhs, kernel = args
        # (Cg, g*N, *L) -> (Cg, g, N, *L) -> (N, g, Cg, *L): the forward's input
        x = lhs.reshape(cg, groups, n, *space_x).permute(2, 1, 0, *sp)
        # (g*Og, N, *T) -> (g, Og, N, *T) -> (N, g, Og, *T): the output gradient
        gout = kernel.reshape(groups, o // groups, n, *space_g).permute(2, 0, 1, *sp)
        x = x.reshape(n, groups * cg, *space_x).contiguous()
        gout = gout.reshape(n, o, *space_g).contiguous()
        w = torch.empty(w_shape, dtype=dtype)
        _, gw, _ = _backward(gout, x, w, None, stride, low, dilation, False, [0] * ns, groups,
                             [False, True, False])
        return [gw]

    return weight_grad


def _slices_to(g: _Graph, name: str, ns: int) -> tuple[list[int], Any] | None:
    """The ``slice`` ops (each keeping the start of spatial dims, stride 1) between
    ``name`` and the convolution producing it: (their body ids, the convolution's hit)."""
    ids: list[int] = []
    for _ in range(ns + 1):
        conv = g.op(name, "stablehlo.convolution")
        if conv is not None:
            return ids, conv
        sl = g.op(name, "stablehlo.slice")
        if sl is None or len(sl[2]) != 1:
            return None
        op = sl[1]
        start, stride = ints(op, "start_indices"), ints(op, "strides", [])
        if any(start) or any(s != 1 for s in stride):
            return None
        ids.append(sl[0])
        name = sl[2][0]
    return None


def conv_weight_grad(g: _Graph, body: Body, at: int) -> tuple[Collapsed, list[int]] | None:
    """The weight-gradient run ending at the ``transpose`` ``body[at]`` as one op."""
    tr, operands = body[at]
    if tr.name != "stablehlo.transpose" or len(operands) != 1:
        return None
    perm = ints(tr, "permutation")
    ns = len(perm) - 2
    if not 1 <= ns <= 3 or perm != [1, 0, *range(2, 2 + ns)]:
        return None
    hit = _slices_to(g, operands[0], ns)
    if hit is None:
        return None
    slice_ids, (conv_id, conv, conv_operands) = hit
    if len(conv_operands) != 2 or any(
        g.producer.get(v) is None or g.producer[v][1].name not in _REARRANGE
        for v in conv_operands
    ):  # fmt: skip
        return None
    impl = _plan(conv, list(tr.result_types[0].shape))
    ids = sorted([conv_id, *slice_ids, at])
    if impl is None or not g.closed(body, ids, at):
        return None
    run_ops = [body[i] for i in ids]
    return _make(tr, tuple(conv_operands), run_ops, impl, "conv_weight_grad"), ids
