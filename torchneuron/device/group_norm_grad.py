"""``native_group_norm``'s gradient in the layout ATen uses for a CPU tensor.

Why: ATen's derivative of ``native_group_norm`` (``derivatives.yaml``) makes the
incoming gradient and the input contiguous in the input's own memory format only when
they are CPU tensors (``device().is_cpu()``) and in the standard format on any other
device, and ``native_group_norm_backward``'s CPU kernel sums in another order for each
format. So a channels-last ``nn.GroupNorm``'s gradients on the ``neuron`` device (its
buffers are CPU tensors, but the device is not ``cpu``) came from the standard-format
kernel where eager PyTorch on the CPU runs the channels-last one: the input's gradient
off in 81 of 144 float32 elements of a [2, 6, 3, 4] input, the weight's in 4 of 6, the
bias's in 5 of 6, in the device's eager and under ``torch.compile`` (whose fake tensors
are on the device too), and in adaptive eager's replays of either. (Half and bfloat16
came out equal.)

``register`` puts ``native_group_norm`` at the device's autograd key: ATen's own
autograd kernel (its node, its formulas, so second derivatives, forward-mode AD and
functorch are ATen's), plus, for an input whose suggested format is not the standard
one, a hook on the node that recomputes the gradients with the gradient and the input
in that format wherever ATen's formula called the kernel (grad mode off in the backward
and no gradient for the mean or the reciprocal deviation: otherwise ATen's composite
formula ran, whose ops do not depend on the device). The standard-format kernel still
runs first there (a node's result can be replaced, not its call skipped); a graph
compiled from it drops the unused result. Imports torch only.
"""

from __future__ import annotations

import torch
from torch._C import DispatchKey
from torch._prims_common import suggest_memory_format

__all__ = ["native_group_norm", "register"]

aten = torch.ops.aten

Grads = tuple[torch.Tensor | None, ...]


def _in_cpu_layout(grad_inputs: Grads, grad_outputs: Grads) -> Grads | None:
    """A post-hook of ATen's ``NativeGroupNormBackward0``: where the node called
    ``native_group_norm_backward`` (grad mode off, only the output's gradient), the
    gradients that call gives for the operands in the input's format (a CPU tensor's);
    ``None`` (the node's own gradients) elsewhere."""
    grad = grad_outputs[0]
    if torch.is_grad_enabled() or grad is None or \
            any(g is not None for g in grad_outputs[1:]):
        return None
    node = torch._C._current_autograd_node()
    x = node._saved_input
    layout = suggest_memory_format(x)
    mask = [g is not None for g in grad_inputs]
    # always the input's gradient too: the channels-last kernel writes it unasked (torch
    # 2.13 crashes on the CPU without it: a segmentation fault for a weight-only gradient)
    got = aten.native_group_norm_backward.default(
        grad.contiguous(memory_format=layout), x.contiguous(memory_format=layout),
        node._saved_result1, node._saved_result2, node._saved_weight, node._saved_N,
        node._saved_C, node._saved_HxW, node._saved_group, [True, *mask[1:]])
    return tuple(g if want else None for g, want in zip(got, mask, strict=True))


def native_group_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                      n: int, c: int, hxw: int, group: int,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten.native_group_norm``, whose gradient is eager's for CPU tensors."""
    out = aten.native_group_norm.default._op_dk(DispatchKey.Autograd, x, weight, bias, n, c,
                                                hxw, group, eps)
    node = out[0].grad_fn
    if node is not None and suggest_memory_format(x) != torch.contiguous_format \
            and type(node).__name__ == "NativeGroupNormBackward0":
        node.register_hook(_in_cpu_layout)
    return out


def register(lib: torch.library.Library) -> None:
    """The device's ``native_group_norm`` (at its autograd key)."""
    lib.impl("native_group_norm", native_group_norm, "AutogradPrivateUse1")
