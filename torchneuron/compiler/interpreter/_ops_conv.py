"""Contractions: dot_general, dot and convolution (general dimension numbers).

dot_general permutes both sides to [batch, free, contract] and calls one bmm, or ``mm``
when it has no batch dims: eager's ``mm`` (every linear layer, ``matmul`` of a matrix)
calls BLAS while its ``bmm`` sums a small product (under 400 multiply-adds) in a loop of
its own, so a matrix product taken as a one-batch ``bmm`` was off from eager in the last
bits (a 4x4 by 4x16 gradient product in 28 of 64 elements); the
convolution permutes to torch's NCHW/OIHW layout, expresses lhs dilation and (possibly
negative) padding as a StableHLO pad, and calls torch's conv with rhs dilation, stride
and feature groups; batch groups are split into separate convs.
When the result type is wider than the operands (preferred element type, e.g. bf16 x
bf16 -> f32) the operands are converted first, so accumulation happens in the wider
type; otherwise the computation stays in the operand dtype. Integer convolutions are
computed in int64 (torch has no integer conv kernel): products summed over windows and
input features, wrapping as eager's int64 arithmetic does; they were convolved in
float64, which lost every bit past 2**53.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
import torch.nn.functional as F

from torchneuron.compiler.interpreter._ops_shape import pad_tensor
from torchneuron.compiler.interpreter._registry import Runner, ints, out_dtype, register
from torchneuron.compiler.stablehlo.ir import Operation


def _compute_dtype(a: torch.Tensor, b: torch.Tensor, out: torch.dtype) -> torch.dtype:
    """Operands' dtype, or the result's if it is a wider float; ints/bools via f64/i64."""
    if out.is_floating_point and (
        not a.dtype.is_floating_point or torch.finfo(out).bits > torch.finfo(a.dtype).bits
    ):
        return out
    if not out.is_floating_point:
        return torch.int64
    return a.dtype


def _prod(xs: list[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def dot_general_tensors(
    a: torch.Tensor,
    b: torch.Tensor,
    lb: list[int],
    rb: list[int],
    lc: list[int],
    rc: list[int],
    out: torch.dtype,
) -> torch.Tensor:
    lf = [d for d in range(a.dim()) if d not in lb and d not in lc]
    rf = [d for d in range(b.dim()) if d not in rb and d not in rc]
    ct = _compute_dtype(a, b, out)
    a, b = a.to(ct), b.to(ct)
    bs = [a.shape[d] for d in lb]
    lfs, rfs, cs = [a.shape[d] for d in lf], [b.shape[d] for d in rf], [a.shape[d] for d in lc]
    a3 = a.permute(lb + lf + lc).reshape(_prod(bs), _prod(lfs), _prod(cs))
    b3 = b.permute(rb + rc + rf).reshape(_prod(bs), _prod(cs), _prod(rfs))
    if ct == torch.int64:  # CPU bmm has no integer kernel everywhere: exact via sums
        r = (a3.unsqueeze(-1) * b3.unsqueeze(1)).sum(dim=2)
    elif not lb:  # a matrix product: eager's mm (see the module's docstring)
        r = torch.mm(a3[0], b3[0]).unsqueeze(0)
    else:
        r = torch.bmm(a3, b3)
    return r.reshape(bs + lfs + rfs).to(out)


@register("stablehlo.dot_general")
def dot_general(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    a, b = args
    dn = op.attributes["dot_dimension_numbers"]
    return [
        dot_general_tensors(
            a,
            b,
            list(dn.get("lhs_batching_dimensions", [])),
            list(dn.get("rhs_batching_dimensions", [])),
            list(dn["lhs_contracting_dimensions"]),
            list(dn["rhs_contracting_dimensions"]),
            out_dtype(op),
        )
    ]


@register("stablehlo.dot")
def dot(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    a, b = args
    return [dot_general_tensors(a, b, [], [], [a.dim() - 1], [0], out_dtype(op))]


_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@register("stablehlo.convolution")
def convolution(op: Operation, args: list[Any], run: Runner) -> list[Any]:
    lhs, rhs = args
    dn = op.attributes["dimension_numbers"]
    sp_in = list(dn["input_spatial_dimensions"])
    sp_k = list(dn["kernel_spatial_dimensions"])
    sp_out = list(dn["output_spatial_dimensions"])
    ns = len(sp_in)
    out = out_dtype(op)
    ct = _compute_dtype(lhs, rhs, out)
    x = lhs.permute([dn["input_batch_dimension"], dn["input_feature_dimension"]] + sp_in).to(ct)
    w = rhs.permute(
        [dn["kernel_output_feature_dimension"], dn["kernel_input_feature_dimension"]] + sp_k
    ).to(ct)
    strides = ints(op, "window_strides", [1] * ns)
    padding = ints(op, "padding", [0] * (2 * ns))
    lhs_dil = ints(op, "lhs_dilation", [1] * ns)
    rhs_dil = ints(op, "rhs_dilation", [1] * ns)
    reversal = op.attributes.get("window_reversal") or [False] * ns
    if any(reversal):
        w = torch.flip(w, [2 + i for i, rev in enumerate(reversal) if rev])
    low = [0, 0] + padding[0::2]
    high = [0, 0] + padding[1::2]
    interior = [0, 0] + [d - 1 for d in lhs_dil]
    x = pad_tensor(x, torch.zeros((), dtype=ct), low, high, interior)
    fgc = int(op.attributes.get("feature_group_count", 1))
    bgc = int(op.attributes.get("batch_group_count", 1))
    conv = _int_conv if ct == torch.int64 else _CONV.get(ns)
    if conv is None:
        if ns != 0:
            raise NotImplementedError(f"convolution with {ns} spatial dims")
        y = _conv0d(x, w, fgc, bgc)
    elif bgc == 1:
        y = conv(x, w, stride=strides, dilation=rhs_dil, groups=fgc)
    else:  # batch groups: batch group g of lhs pairs with output-feature group g of rhs
        xs = x.chunk(bgc, dim=0)
        ws = w.chunk(bgc, dim=0)
        y = torch.cat(
            [
                conv(xg, wg, stride=strides, dilation=rhs_dil, groups=fgc)
                for xg, wg in zip(xs, ws, strict=False)
            ],
            dim=1,
        )
    # y is [b, f, spatial...]; move to the declared output layout
    order = [dn["output_batch_dimension"], dn["output_feature_dimension"]] + sp_out
    perm = [order.index(d) for d in range(len(order))]
    return [y.permute(perm).to(out)]


def _conv0d(x: torch.Tensor, w: torch.Tensor, fgc: int, bgc: int) -> torch.Tensor:
    """No spatial dims: a (grouped) matmul."""
    x3 = x.unsqueeze(-1)
    w3 = w.unsqueeze(-1)
    if bgc == 1:
        return F.conv1d(x3, w3, groups=fgc).squeeze(-1)
    xs, ws = x3.chunk(bgc, dim=0), w3.chunk(bgc, dim=0)
    return torch.cat(
        [F.conv1d(a, b, groups=fgc) for a, b in zip(xs, ws, strict=False)], dim=1
    ).squeeze(-1)


def _int_conv(x: torch.Tensor, w: torch.Tensor, stride: list[int], dilation: list[int],
              groups: int) -> torch.Tensor:
    """``F.conv*d`` of int64 tensors (already padded), exact: for each kernel offset, the
    strided input window times the kernel tap, summed over the group's input features."""
    ns = x.dim() - 2
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    k = list(w.shape[2:])
    out = [(x.shape[2 + d] - dilation[d] * (k[d] - 1) - 1) // stride[d] + 1 for d in range(ns)]
    xg = x.reshape(n, groups, 1, cg, *x.shape[2:])
    wg = w.reshape(groups, o // groups, cg, *k)
    acc = torch.zeros(n, groups, o // groups, *out, dtype=torch.int64)
    for offset in itertools.product(*[range(kd) for kd in k]):
        window = [slice(None)] * 4 + [
            slice(offset[d] * dilation[d], offset[d] * dilation[d] + (out[d] - 1) * stride[d] + 1,
                  stride[d]) for d in range(ns)]
        tap = wg[(slice(None), slice(None), slice(None), *offset)]
        acc += (xg[tuple(window)] * tap.reshape(1, groups, o // groups, cg, *[1] * ns)).sum(3)
    return acc.reshape(n, o, *out)
