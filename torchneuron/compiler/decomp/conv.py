"""``convolution_backward`` as forward convolutions, which Torch-MLIR lowers.

This torch-mlir lowers ``aten.convolution`` in 1d/2d/3d, plain and transposed, but
``convolution_backward`` only for 2d non-transposed convolutions, so every Conv1d,
Conv3d and ConvTranspose training graph fell back to eager. The three gradients are
convolutions themselves:

- input gradient of a convolution = the transposed convolution of the output gradient
  with the same weight (``output_padding`` restores the rows the forward's floor
  dropped), and of a transposed convolution = the plain convolution (cut to the
  input: an ``output_padding`` of at least the stride adds rows);
- weight gradient = a convolution of the input (channels as batch, batch as
  channels) with the output gradient as the kernel, stride and dilation swapped,
  cut to the kernel size; groups stay groups;
- bias gradient = the output gradient summed over batch and space.

Torch-MLIR also applies a transposed convolution's ``output_padding`` to the wrong
spatial dims when it differs between dims (``(2, 3)`` gave 23x21 for 22x22), so such a
convolution is the full transposed convolution (no padding) cut to the output by one
``constant_pad_nd``: ``padding`` rows off the start (a negative pad), and zeros past the
end where ``output_padding`` exceeds ``padding`` (the interpreter folds the two back into
one eager call, ``collapse/conv_transpose.py``).

The sums run in a different order than ATen's kernels, so results agree to fp32
rounding, not bitwise (checked against eager in tests/compiler/test_decomp_conv.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchneuron.compiler.decomp.fused_bias import mark_bias, markable, marking
from torchneuron.compiler.errors import PrepareError

__all__ = ["CONV_DECOMPOSITIONS"]

aten = torch.ops.aten


def _expand(v: Sequence[int] | int, n: int) -> list[int]:
    v = [v] if isinstance(v, int) else list(v)
    return v * n if len(v) == 1 else v


def _weight_grad(inp: torch.Tensor, gout: torch.Tensor, ksize: Sequence[int],
                 stride: list[int], padding: list[int], dilation: list[int],
                 groups: int) -> torch.Tensor:
    """d conv(inp, W) / d W for W of shape (O, C/groups, *ksize), given d out = gout."""
    n, c = inp.shape[:2]
    o = gout.shape[1]
    cg, og = c // groups, o // groups
    space_in, space_out = list(inp.shape[2:]), list(gout.shape[2:])
    nd = len(space_in)
    # (N, g, Cg, *L) -> (Cg, g, N, *L) -> (Cg, g*N, *L): channels of group j are its N samples.
    x = inp.reshape(n, groups, cg, *space_in).movedim(2, 0).movedim(1, 2)
    x = x.reshape(cg, groups * n, *space_in)
    # (N, g, Og, *T) -> (g, Og, N, *T) -> (g*Og, N, *T): one kernel per output channel.
    k = gout.reshape(n, groups, og, *space_out).movedim(0, 2).reshape(groups * og, n, *space_out)
    r = aten.convolution.default(x, k, None, dilation, padding, stride, False, [0] * nd, groups)
    for i, size in enumerate(ksize):
        r = r.narrow(2 + i, 0, size)
    return r.transpose(0, 1)


def _channels_last(t: torch.Tensor) -> bool:
    """A tensor laid out channels-last (not also contiguous: one channel or one pixel)."""
    return t.dim() in (4, 5) and not t.is_contiguous() and (
        t.is_contiguous(memory_format=torch.channels_last) if t.dim() == 4
        else t.is_contiguous(memory_format=torch.channels_last_3d))


def convolution_backward(grad: torch.Tensor, inp: torch.Tensor, weight: torch.Tensor,
                         bias_sizes: Any, stride: Any, padding: Any, dilation: Any,
                         transposed: bool, output_padding: Any, groups: int,
                         output_mask: Sequence[bool]) -> tuple[Any, Any, Any]:
    if any(_channels_last(t) for t in (grad, inp, weight)):
        if torch._guards.TracingContext.try_get() is not None:
            return NotImplemented  # (AOTAutograd's trace: a raise would reach the user)
        raise PrepareError(
            "aten.convolution_backward of channels_last tensors: eager's kernel computes "
            "it in that layout and the gradients lowered here differ in the last bits "
            "(180 of 216 input-gradient elements of a Conv2d), so this graph runs eagerly. "
            "Expected contiguous tensors; nothing to change in your program.",
            op="aten.convolution_backward", reason="conv-channels-last-grad")
    nd = inp.dim() - 2
    stride, padding, dilation = (_expand(v, nd) for v in (stride, padding, dilation))
    ksize = list(weight.shape[2:])
    g_in = g_w = g_b = None
    if output_mask[0]:
        if transposed:
            g_in = aten.convolution.default(grad, weight, None, stride, padding, dilation,
                                            False, [0] * nd, groups)
            for i in range(nd):  # output_padding >= stride (with dilation) adds rows
                g_in = g_in.narrow(2 + i, 0, inp.shape[2 + i])
        else:
            extra = [inp.shape[2 + i] - ((grad.shape[2 + i] - 1) * stride[i] - 2 * padding[i]
                                         + dilation[i] * (ksize[i] - 1) + 1) for i in range(nd)]
            g_in = aten.convolution.default(grad, weight, None, stride, padding, dilation,
                                            True, extra, groups)
    if output_mask[1]:
        if transposed:  # the forward was the input gradient of a conv from grad's space
            g_w = _weight_grad(grad, inp, ksize, stride, padding, dilation, groups)
        else:
            g_w = _weight_grad(inp, grad, ksize, stride, padding, dilation, groups)
        # ATen's gradient has the weight's layout; a permuted one makes AccumulateGrad
        # copy it into the parameter's layout on every step.
        g_w = g_w.contiguous(memory_format=torch._prims_common.suggest_memory_format(weight))
    if output_mask[2]:
        g_b = grad.sum([0, *range(2, grad.dim())])
    return g_in, g_w, g_b


def convolution(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Any,
                padding: Any, dilation: Any, transposed: bool, output_padding: Any,
                groups: int) -> Any:
    """A float convolution's bias is marked (``decomp/fused_bias.py``); transposed convolutions with
    ``output_padding`` differing between dims are rewritten (see the module docstring);
    everything else is traced as is."""
    nd = x.dim() - 2
    out_pad = _expand(output_padding, nd) if nd > 0 else []
    if not transposed or len(set(out_pad)) <= 1 or x.dim() != weight.dim():
        if not markable(bias) or torch._guards.TracingContext.try_get() is not None:
            return NotImplemented  # (AOTAutograd's trace: prepare's own trace marks it)
        with marking.inside():  # the bias eager adds in its kernel (decomp/fused_bias.py)
            return aten.convolution.default(x, weight, mark_bias(bias), stride, padding,
                                            dilation, transposed, output_padding, groups)
    stride, padding, dilation = (_expand(v, nd) for v in (stride, padding, dilation))
    full = aten.convolution.default(x, weight, None, stride, [0] * nd, dilation, True,
                                    [0] * nd, groups)
    sizes = [(x.shape[2 + i] - 1) * stride[i] - 2 * padding[i]
             + dilation[i] * (weight.shape[2 + i] - 1) + out_pad[i] + 1 for i in range(nd)]
    # one constant_pad_nd cuts ``padding`` rows off the start and pads or cuts the end
    # (last dim first): the interpreter folds it back into one eager transposed call
    pad: list[int] = []
    for i in reversed(range(nd)):
        pad += [-padding[i], padding[i] + sizes[i] - full.shape[2 + i]]
    full = aten.constant_pad_nd.default(full, pad, 0.0)
    if bias is not None:
        full = full + bias.reshape(1, -1, *([1] * nd))
    return full


CONV_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    aten.convolution_backward.default: convolution_backward,
    aten.convolution.default: convolution,
}
