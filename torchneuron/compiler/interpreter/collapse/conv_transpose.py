"""Transposed convolutions run as eager's own kernel, ``F.conv_transpose{1,2,3}d``.

Why: Torch-MLIR lowers a transposed ``aten.convolution`` as the kernel transposed to
spatial-first, ``stablehlo.reverse`` over its spatial dims, and a ``stablehlo.convolution``
of the input dilated by the stride (``lhs_dilation``) and padded by ``d * (k - 1) - p``
(plus ``output_padding`` at the high end). The generic convolution runs that as a plain
convolution of the zero-stuffed input: the same products, summed in another order than
eager's transposed kernel, so 28 to 69% of the elements of a random float32
``conv_transpose1d/2d/3d`` differed from eager in the last bits (``conv_transpose3d`` by up
to 3.05e-5 in the replay sweep, issue 22). ``decomp_conv`` writes a convolution's input
gradient the same way, so training steps of every CNN had the same difference.

Recognised at load time: a float convolution whose kernel is a ``reverse`` over exactly its
spatial dims, with window strides 1, one feature group and one batch group, and pads that
map back to a transposed convolution's ``padding`` (at least 0) and ``output_padding``
(below the stride or the dilation, as torch requires). It runs as ``F.conv_transpose``
of the input and the un-reversed kernel permuted to torch's ``(in, out, *k)`` layout: the
same convolution, computed by the kernel eager calls for it. Anything else keeps the
generic convolution.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from torchneuron.compiler.interpreter._registry import OpFn, Runner, ints
from torchneuron.compiler.interpreter.collapse.base import Body, Collapsed
from torchneuron.compiler.stablehlo._dtypes import TORCH_DTYPES
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["conv_transposes"]

_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_FLOATS = (torch.float32, torch.float64)


def _plan(conv: Operation, rev: Operation) -> OpFn | None:
    """The callable computing ``conv`` from (input, un-reversed kernel), or None."""
    dn = conv.attributes["dimension_numbers"]
    sp_in = list(dn["input_spatial_dimensions"])
    sp_k = list(dn["kernel_spatial_dimensions"])
    sp_out = list(dn["output_spatial_dimensions"])
    ns = len(sp_in)
    fn = _CONV_T.get(ns)
    dtypes = {TORCH_DTYPES.get(t.dtype) for t in (*conv.operand_types, *conv.result_types)}
    if fn is None or len(dtypes) != 1 or dtypes.pop() not in _FLOATS:
        return None
    if sorted(ints(rev, "dimensions")) != sorted(sp_k):
        return None
    if int(conv.attributes.get("feature_group_count", 1)) != 1 or \
            int(conv.attributes.get("batch_group_count", 1)) != 1:
        return None
    if ints(conv, "window_strides", [1] * ns) != [1] * ns or \
            any(conv.attributes.get("window_reversal") or []):
        return None
    k_shape = conv.operand_types[1].shape
    x_shape = conv.operand_types[0].shape
    out_shape = conv.result_types[0].shape
    if not all(s >= 0 for s in (*k_shape, *x_shape, *out_shape)):
        return None
    padding = ints(conv, "padding", [0] * (2 * ns))
    stride = ints(conv, "lhs_dilation", [1] * ns)
    dilation = ints(conv, "rhs_dilation", [1] * ns)
    pad, out_pad = [], []
    for i in range(ns):
        k, s, d = k_shape[sp_k[i]], stride[i], dilation[i]
        low, high = padding[2 * i], padding[2 * i + 1]
        p, op = d * (k - 1) - low, high - low
        if p < 0 or not 0 <= op < max(s, d):
            return None
        if (x_shape[sp_in[i]] - 1) * s - 2 * p + d * (k - 1) + op + 1 != out_shape[sp_out[i]]:
            return None
        pad.append(p)
        out_pad.append(op)
    x_perm = [dn["input_batch_dimension"], dn["input_feature_dimension"], *sp_in]
    w_perm = [dn["kernel_input_feature_dimension"], dn["kernel_output_feature_dimension"], *sp_k]
    order = [dn["output_batch_dimension"], dn["output_feature_dimension"], *sp_out]
    y_perm = [order.index(d) for d in range(len(order))]

    def conv_transpose(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x, kernel = args
        y = fn(x.permute(x_perm).contiguous(), kernel.permute(w_perm).contiguous(),
               stride=stride, padding=pad, output_padding=out_pad, dilation=dilation)
        return [y.permute(y_perm)]

    return conv_transpose


def conv_transposes(body: Body) -> Body:
    """``body`` with each recognised transposed convolution made one op reading the
    kernel before its ``reverse`` (the ``reverse`` stays for any other reader)."""
    producer = {r: (op, operands) for op, operands in body for r in op.results}
    out: Body = []
    for op, operands in body:
        hit = producer.get(operands[1]) if op.name == "stablehlo.convolution" \
            and len(operands) == 2 else None
        impl = None
        if hit is not None and hit[0].name == "stablehlo.reverse" and not isinstance(op, Collapsed):
            impl = _plan(op, hit[0])
        if impl is None:
            out.append((op, operands))
            continue
        rev, rev_operands = hit
        outer = (operands[0], rev_operands[0])
        made = Collapsed(name="torchneuron.collapsed.conv_transpose", results=list(op.results),
                      operands=list(outer),
                      operand_types=[op.operand_types[0], rev.operand_types[0]],
                      result_types=list(op.result_types),
                      attributes={"ops": [rev.name, op.name]}, impl=impl,
                      run_ops=[hit, (op, operands)])
        out.append((made, outer))
    return out
