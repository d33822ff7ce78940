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

With ``groups > 1`` Torch-MLIR reshapes and transposes the reversed kernel into the
forward convolution's per-group ``(out, in / groups, *k)`` blocks (up to four such ops
between the ``reverse`` and the convolution), and so does ``decomp_conv`` for a grouped
convolution's input gradient; these ran as the generic convolution (20 to 75% of the
elements differed). Such a convolution (``feature_group_count`` groups) runs as
``F.conv_transpose(groups=)`` of a weight rebuilt from the convolution's own kernel
operand: un-reversed, and each group's block transposed to torch's
``(in / groups, out / groups, *k)``; moves no bits, so the result is eager's kernel's.

``conv_transpose_crops`` (a collapse plug-in, tried first) then folds a zero ``pad`` with
negative low pads after such an op (``decomp_conv``'s crop of a full transposed
convolution) into the call's ``padding`` and ``output_padding``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from torchneuron.compiler.interpreter._registry import OpFn, Runner, ints
from torchneuron.compiler.interpreter.collapse.base import Body, Collapsed, _Graph
from torchneuron.compiler.stablehlo._dtypes import TORCH_DTYPES
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["conv_transpose_crops", "conv_transposes"]

_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_FLOATS = (torch.float32, torch.float64)


def _plan(conv: Operation, rev_dims: list[int], direct: bool,
          crop: list[tuple[int, int]] | None = None) -> OpFn | None:
    """The callable computing ``conv`` from (input, kernel), or None. ``direct``: the
    kernel operand is ``rev`` itself (the callable reads the un-reversed kernel); else
    ``rev`` is reached through ``reshape`` / ``transpose`` ops (a grouped transposed
    convolution; the callable reads the convolution's own kernel operand). ``crop``: the
    (low, high) edge pads of a ``pad`` of the result per spatial dim (low at most 0), taken
    into the call's ``padding`` and ``output_padding``."""
    dn = conv.attributes["dimension_numbers"]
    sp_in = list(dn["input_spatial_dimensions"])
    sp_k = list(dn["kernel_spatial_dimensions"])
    sp_out = list(dn["output_spatial_dimensions"])
    ns = len(sp_in)
    fn = _CONV_T.get(ns)
    dtypes = {TORCH_DTYPES.get(t.dtype) for t in (*conv.operand_types, *conv.result_types)}
    if fn is None or len(dtypes) != 1 or dtypes.pop() not in _FLOATS:
        return None
    rev_dims = sorted(rev_dims)
    if (rev_dims != sorted(sp_k)) if direct else (len(rev_dims) != ns):
        return None
    groups = int(conv.attributes.get("feature_group_count", 1))
    if (direct and groups != 1) or groups < 1 or \
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
    c_out, c_in_g = k_shape[dn["kernel_output_feature_dimension"]], \
        k_shape[dn["kernel_input_feature_dimension"]]
    if c_out % groups or c_in_g * groups != x_shape[dn["input_feature_dimension"]]:
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
        if crop is not None:  # rows off the start are padding; the end's, output_padding
            lo, hi = crop[i]
            size = out_shape[sp_out[i]] + lo + hi
            p = p - lo
            op = size - ((x_shape[sp_in[i]] - 1) * s - 2 * p + d * (k - 1) + 1)
            if lo > 0 or not 0 <= op < max(s, d):
                return None
        pad.append(p)
        out_pad.append(op)
    x_perm = [dn["input_batch_dimension"], dn["input_feature_dimension"], *sp_in]
    order = [dn["output_batch_dimension"], dn["output_feature_dimension"], *sp_out]
    y_perm = [order.index(d) for d in range(len(order))]
    if direct:
        w_perm = [dn["kernel_input_feature_dimension"], dn["kernel_output_feature_dimension"],
                  *sp_k]

        def conv_transpose(op: Operation, args: list[Any], run: Runner) -> list[Any]:
            x, kernel = args
            y = fn(x.permute(x_perm).contiguous(), kernel.permute(w_perm).contiguous(),
                   stride=stride, padding=pad, output_padding=out_pad, dilation=dilation)
            return [y.permute(y_perm)]

        return conv_transpose

    # the kernel as the forward convolution reads it, (out, in / groups, *k) reversed;
    # group j's block of torch's (in, out / groups, *k) weight is its block transposed
    k_perm = [dn["kernel_output_feature_dimension"], dn["kernel_input_feature_dimension"],
              *sp_k]
    k_space = [k_shape[d] for d in sp_k]
    flip = list(range(2, 2 + ns))

    def grouped(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x, kernel = args
        w = kernel.permute(k_perm).flip(flip)
        w = w.reshape(groups, c_out // groups, c_in_g, *k_space).transpose(1, 2)
        w = w.reshape(groups * c_in_g, c_out // groups, *k_space).contiguous()
        y = fn(x.permute(x_perm).contiguous(), w, stride=stride, padding=pad,
               output_padding=out_pad, groups=groups, dilation=dilation)
        return [y.permute(y_perm)]

    return grouped


def _reverse_behind(producer: dict[str, tuple[Operation, tuple[str, ...]]],
                    name: str) -> tuple[Operation, tuple[str, ...]] | None:
    """The ``reverse`` that ``name`` is rearranged from by up to four ``reshape`` /
    ``transpose`` ops (how Torch-MLIR writes a grouped transposed kernel), or None."""
    for _ in range(4):
        hit = producer.get(name)
        if hit is None or hit[0].name not in ("stablehlo.reshape", "stablehlo.transpose") \
                or len(hit[1]) != 1:
            return None
        name = hit[1][0]
        rev = producer.get(name)
        if rev is not None and rev[0].name == "stablehlo.reverse":
            return rev
    return None


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
            impl = _plan(op, ints(hit[0], "dimensions"), direct=True)
        elif hit is not None and not isinstance(op, Collapsed):
            rev = _reverse_behind(producer, operands[1])
            grouped = None if rev is None else _plan(op, ints(rev[0], "dimensions"),
                                                     direct=False)
            if grouped is not None:  # reads the convolution's own operands
                made = Collapsed(name="torchneuron.collapsed.conv_transpose",
                                 results=list(op.results), operands=list(operands),
                                 operand_types=list(op.operand_types),
                                 result_types=list(op.result_types),
                                 attributes={"ops": [op.name], "reversed": ints(rev[0], "dimensions"),
                                             "direct": False}, impl=grouped,
                                 run_ops=[(op, operands)])
                out.append((made, tuple(operands)))
                continue
        if impl is None:
            out.append((op, operands))
            continue
        rev, rev_operands = hit
        outer = (operands[0], rev_operands[0])
        made = Collapsed(name="torchneuron.collapsed.conv_transpose", results=list(op.results),
                      operands=list(outer),
                      operand_types=[op.operand_types[0], rev.operand_types[0]],
                      result_types=list(op.result_types),
                      attributes={"ops": [rev.name, op.name],
                                  "reversed": ints(rev, "dimensions"), "direct": True},
                      impl=impl,
                      run_ops=[hit, (op, operands)])
        out.append((made, outer))
    return out


def conv_transpose_crops(g: _Graph, body: Body, at: int) -> tuple[Collapsed, list[int]] | None:
    """A ``pad`` cutting rows off a transposed convolution made above (and adding zero
    rows past its end) as one call with that ``padding`` and ``output_padding``.

    Why: Torch-MLIR gets a transposed convolution's ``output_padding`` wrong when it
    differs between dims, so ``decomp_conv`` writes such a convolution (and the input
    gradient of a strided convolution whose dims drop different numbers of rows) as the
    full transposed convolution cropped by one ``constant_pad_nd`` with negative low pads.
    Eager's kernel, asked for the full one, sums some rows in another order than when
    asked for the cropped one (87 of 432 elements of a 9x8 stride-2 Conv2d's input
    gradient differed): folded back, the call is eager's own. A zero ``pad`` (``+0.0``,
    no interior) of the spatial dims only, read from a ``conv_transpose`` op nobody else
    reads, whose low pads are at most 0 and whose rows map back to a ``padding`` of at
    least 0 and an ``output_padding`` below the stride or the dilation."""
    pad_op, operands = body[at]
    if pad_op.name != "stablehlo.pad" or len(operands) != 2:
        return None
    hit = g.producer.get(operands[0])
    if hit is None or not isinstance(hit[1], Collapsed) \
            or hit[1].name != "torchneuron.collapsed.conv_transpose":
        return None
    ct = hit[1]
    zero = g.op(operands[1], "stablehlo.constant")
    value = zero[1].attributes.get("value") if zero is not None else None
    splat = value.get("splat") if isinstance(value, dict) else None
    if not isinstance(splat, (int, float)) or splat != 0 or math.copysign(1.0, splat) < 0:
        return None
    conv = next((op for op, _ in ct.run_ops if op.name == "stablehlo.convolution"), None)
    if conv is None or "reversed" not in ct.attributes:
        return None
    dn = conv.attributes["dimension_numbers"]
    rank = len(conv.result_types[0].shape)
    low, high = ints(pad_op, "edge_padding_low"), ints(pad_op, "edge_padding_high")
    interior = ints(pad_op, "interior_padding", [0] * rank)
    keep = (dn["output_batch_dimension"], dn["output_feature_dimension"])
    if len(low) != rank or any(interior) or any(low[d] or high[d] for d in keep):
        return None
    crop = [(low[d], high[d]) for d in dn["output_spatial_dimensions"]]
    impl = _plan(conv, list(ct.attributes["reversed"]), bool(ct.attributes["direct"]), crop)
    ids = [hit[0], at]
    if impl is None or not g.closed(body, ids, at):
        return None
    run_ops = [*ct.run_ops, (pad_op, operands)]
    made = Collapsed(name="torchneuron.collapsed.conv_transpose", results=list(pad_op.results),
                     operands=list(ct.operands), operand_types=list(ct.operand_types),
                     result_types=list(pad_op.result_types),
                     attributes={**ct.attributes, "ops": [*ct.attributes["ops"], pad_op.name]},
                     impl=impl, run_ops=run_ops)
    return made, ids
