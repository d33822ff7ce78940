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
block inputs is left alone); one of the two may be a constant instead, which the
rearrangement of a constant became when the program was loaded (a region adaptive eager
captured from ``loss = out.sum()`` to the backward holds the output gradient as ones:
its weight gradients were the generic convolution's, off in 96 of 108 elements of a
Conv2d's). Only the run's ``transpose`` may be read outside it. The
collapsed op reads the convolution's two operands, undoes ``decomp_conv``'s rearrangement
(exact: moves no bits) into the forward's input ``(N, C, *L)`` and output gradient
``(N, O, *T)``, and calls ``aten.convolution_backward`` for the weight only, with the
forward's stride (the convolution's ``rhs_dilation``), dilation (its window strides),
padding and groups. The weight's values do not enter the weight gradient: an empty
tensor of its shape stands for it.

The bias gradient, where there is one, is the output gradient summed over all dims but
the channels: a plain ``reduce`` in the program, whose order is not eager's either (60 to
100% of float32 bias-gradient elements differed, and a depthwise float64 one). A
``reduce`` adding up, from ``+0.0``, over dims 0 and 2.., the tensor that the weight
gradient's kernel is rearranged from joins the run, and the one ``convolution_backward``
call gives both gradients (as eager's does). The collapsed op then stands at the later of
the two, and is made only if nothing reads the earlier one's result before it.

A transposed convolution's weight gradient is the same convolution with the roles of
input and output gradient swapped (``decomp_conv`` writes it so). With a bias the program
says which it was (a transposed convolution's bias sums what the plain view calls the
input): it runs as eager's own transposed call, weight and bias gradients at once, its
``output_padding`` read off the shapes. Without one it runs as the plain convolution's
weight gradient of the swapped pair, which is how oneDNN computes a deconvolution's
weight gradient itself, and equal to eager's on every case measured (float32 and float64,
1d to 3d, groups 1 to 4), though not eager's call.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import OpFn, Runner, ints
from torchneuron.compiler.interpreter.collapse.base import (
    Body,
    Collapsed,
    _Graph,
    _make,
    _make_multi,
)
from torchneuron.compiler.stablehlo._dtypes import TORCH_DTYPES
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["conv_weight_grad"]

_FLOATS = (torch.float32, torch.float64)
_REARRANGE = ("stablehlo.reshape", "stablehlo.transpose")
# an operand rearranged at load time already: a constant output gradient (a region that
# ends in ``loss.sum()`` and its backward: the gradient is ones)
_CONSTANT = "stablehlo.constant"
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


def _plan(conv: Operation, w_shape: list[int], bias: str | None = None) -> OpFn | None:
    """The callable computing the weight gradient (of shape ``w_shape``) from the
    convolution's operands, or None. ``bias``: also the bias gradient, of a plain
    convolution (``"plain"``: the sum of the output gradient) or of a transposed one
    (``"transposed"``: the sum of what the plain view calls the input)."""
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
    out_pad = [0] * ns
    if bias == "transposed":  # the rows the transposed forward's output_padding added
        out_pad = [space_x[i] - ((space_g[i] - 1) * stride[i] - 2 * low[i]
                                 + dilation[i] * (w_shape[2 + i] - 1) + 1) for i in range(ns)]
        if any(not 0 <= p < max(s, d) for p, s, d in zip(out_pad, stride, dilation,
                                                         strict=True)):
            return None

    def weight_grad(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        lhs, kernel = args
        # (Cg, g*N, *L) -> (Cg, g, N, *L) -> (N, g, Cg, *L): the forward's input
        x = lhs.reshape(cg, groups, n, *space_x).permute(2, 1, 0, *sp)
        # (g*Og, N, *T) -> (g, Og, N, *T) -> (N, g, Og, *T): the output gradient
        gout = kernel.reshape(groups, o // groups, n, *space_g).permute(2, 0, 1, *sp)
        x = x.reshape(n, groups * cg, *space_x).contiguous()
        gout = gout.reshape(n, o, *space_g).contiguous()
        w = torch.empty(w_shape, dtype=dtype)
        if bias == "transposed":  # eager's own call: the input is the output's gradient
            _, gw, gb = _backward(x, gout, w, [groups * cg], stride, low, dilation, True,
                                  out_pad, groups, [False, True, True])
            return [gw, gb]
        _, gw, gb = _backward(gout, x, w, [o] if bias else None, stride, low, dilation, False,
                              [0] * ns, groups, [False, True, bias is not None])
        return [gw, gb] if bias else [gw]

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


def _weight_run(g: _Graph, body: Body, at: int) -> tuple[list[int], Operation,
                                                          tuple[str, ...]] | None:
    """The weight-gradient run ending at the ``transpose`` ``body[at]``: (its body ids, the
    convolution, the convolution's operands), or None."""
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
    made_by = [g.producer[v][1].name if v in g.producer else None for v in conv_operands]
    if len(conv_operands) != 2 or not all(m in _REARRANGE or m == _CONSTANT for m in made_by) \
            or not any(m in _REARRANGE for m in made_by):
        return None
    return sorted([conv_id, *slice_ids, at]), conv, conv_operands


def _shape(g: _Graph, body: Body, name: str) -> list[int] | None:
    hit = g.producer.get(name)
    return None if hit is None else list(hit[1].result_types[hit[1].results.index(name)].shape)


def _bias_reduce(g: _Graph, body: Body, operand: str, grouped: list[int], expect: list[int],
                 dtype: str) -> int | None:
    """The body id of a bias gradient beside a weight gradient, or None: a ``reduce``
    adding up, from ``+0.0``, over all dims but 1, to a vector in ``dtype``, a tensor of
    shape ``expect`` holding the row-major data of the value of shape ``grouped`` that
    the convolution's ``operand`` is rearranged from (the operand of the first of up to
    four ``reshape`` / ``transpose`` ops that is a ``transpose``): that value itself, a
    ``reshape`` before it, or a ``reshape`` of either (a flattened layer's gradient is
    reshaped once for the bias, once for the kernel)."""
    from torchneuron.compiler.interpreter._ops_reduce import simple_body

    name, start = operand, None
    for _ in range(4):  # start: what the transpose nearest the chain's root reads
        hit = g.producer.get(name)
        if hit is None or hit[1].name not in _REARRANGE or len(hit[2]) != 1:
            break
        name = hit[2][0]
        if hit[1].name == "stablehlo.transpose":
            start = name
    if start is None or _shape(g, body, start) != grouped:
        return None
    same = [start]  # values holding the same row-major data
    while True:
        hit = g.op(same[-1], "stablehlo.reshape")
        if hit is None or len(hit[2]) != 1:
            break
        same.append(hit[2][0])
    for v in list(same):
        for i in g.readers(v):
            op = body[i][0]
            if op.name == "stablehlo.reshape" and list(op.result_types[0].shape) == expect:
                same.append(op.results[0])
    for name in same:
        for i in g.readers(name):
            red, red_operands = body[i]
            rank = len(expect)
            if red.name != "stablehlo.reduce" or len(red_operands) != 2 \
                    or red_operands[0] != name or simple_body(red) != "stablehlo.add" \
                    or list(red.operand_types[0].shape) != expect \
                    or sorted(ints(red, "dimensions")) != [0, *range(2, rank)] \
                    or red.result_types[0].dtype != dtype \
                    or list(red.result_types[0].shape) != [expect[1]]:
                continue
            init = g.op(red_operands[1], "stablehlo.constant")
            value = init[1].attributes.get("value") if init is not None else None
            splat = value.get("splat") if isinstance(value, dict) else None
            if isinstance(splat, (int, float)) and splat == 0 \
                    and math.copysign(1.0, splat) > 0:
                return i
    return None


def _bias_of(g: _Graph, body: Body, t: int) -> tuple[int, str] | None:
    """The bias gradient beside the weight gradient whose ``transpose`` is ``body[t]``:
    (its ``reduce``'s body id, ``"plain"`` or ``"transposed"``), or None. A plain
    convolution's bias sums the output gradient (the kernel here); a transposed one's
    sums its own output's gradient (the input here); only a bias tells them apart."""
    run = _weight_run(g, body, t)
    if run is None:
        return None
    conv, (lhs, kernel) = run[1], run[2]
    dtype = body[t][0].result_types[0].dtype
    groups = int(conv.attributes.get("feature_group_count", 1))
    x_shape, k_shape = list(conv.operand_types[0].shape), list(conv.operand_types[1].shape)
    if not 3 <= len(x_shape) <= 5 or groups < 1 or x_shape[1] % groups or k_shape[0] % groups:
        return None
    n, cg, o = k_shape[1], x_shape[0], k_shape[0]
    red = _bias_reduce(g, body, kernel, [n, groups, o // groups, *k_shape[2:]],
                       [n, o, *k_shape[2:]], dtype)
    if red is not None:
        return red, "plain"
    red = _bias_reduce(g, body, lhs, [n, groups, cg, *x_shape[2:]],
                       [n, groups * cg, *x_shape[2:]], dtype)
    return None if red is None else (red, "transposed")


def _read_after(g: _Graph, name: str, at: int) -> bool:
    """Whether every op reading ``name`` comes after ``body[at]``."""
    return all(i > at for i in g.readers(name))


def conv_weight_grad(g: _Graph, body: Body, at: int) -> tuple[Collapsed, list[int]] | None:
    """The weight-gradient run ending at ``body[at]`` as one op: at its ``transpose``, or
    with the bias gradient beside it, at the later of that ``transpose`` and the bias's
    ``reduce`` (one ``convolution_backward`` call then gives both)."""
    op = body[at][0]
    if op.name == "stablehlo.reduce":
        rank = len(op.operand_types[0].shape) if op.operand_types else 0
        if not 3 <= rank <= 5 or sorted(ints(op, "dimensions")) != [0, *range(2, rank)]:
            return None  # not a bias gradient: spare the scan below
        t = _weight_of_bias(g, body, at)
        if t is None or t > at:
            return None
        return _collapse(g, body, t, _bias_of(g, body, t))
    bias = _bias_of(g, body, at)
    if bias is not None and bias[0] > at and _read_after(g, op.results[0], bias[0]):
        return None  # made at the reduce, with the bias gradient
    return _collapse(g, body, at, bias if bias is not None and bias[0] < at else None)


def _weight_of_bias(g: _Graph, body: Body, red: int) -> int | None:
    """The body id of the weight gradient's ``transpose`` whose bias gradient is the
    ``reduce`` ``body[red]`` (``_bias_reduce``'s inverse), or None."""
    for t, (op, _) in enumerate(body):
        if op.name != "stablehlo.transpose":
            continue
        bias = _bias_of(g, body, t)
        if bias is not None and bias[0] == red:
            return t
    return None


def _collapse(g: _Graph, body: Body, t: int,
              bias: tuple[int, str] | None) -> tuple[Collapsed, list[int]] | None:
    """The weight-gradient run at ``body[t]`` (with the bias gradient ``bias``, from
    ``_bias_of``) as one op placed at the later of the two."""
    red, kind = bias if bias is not None else (None, None)
    run = _weight_run(g, body, t)
    if run is None:
        return None
    ids, conv, conv_operands = run
    tr = body[t][0]
    if red is not None and red > t and not _read_after(g, tr.results[0], red):
        return None
    if red is not None and red < t and not _read_after(g, body[red][0].results[0], t):
        red = kind = None
    impl = _plan(conv, list(tr.result_types[0].shape), bias=kind)
    if impl is None or not g.closed(body, ids, t):
        return None
    if red is None:
        return _make(tr, tuple(conv_operands), [body[i] for i in ids], impl,
                     "conv_weight_grad"), ids
    ids = sorted([*ids, red])
    rop = body[red][0]
    return _make_multi((tr.results[0], rop.results[0]),
                       (tr.result_types[0], rop.result_types[0]), tuple(conv_operands),
                       [body[i] for i in ids], impl, "conv_weight_bias_grad"), ids
