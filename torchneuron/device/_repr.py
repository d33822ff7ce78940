"""``repr`` of a neuron tensor: CPU's text for the same values, plus the device suffix.

Why not PyTorch's ``Tensor.__repr__``: it would format the values with indexing ops
on the device and title the result ``NeuronTensor(``; and printing a ``.cpu()`` copy
shows the copy's ``grad_fn=<ToCopyBackward0>`` even for a leaf. Instead the values
are read back once (``.detach().cpu()``, an op the device sees), formatted by
PyTorch's own formatter, and the suffixes follow PyTorch's order for an accelerator
tensor: ``device=`` first, then size/dtype, then ``grad_fn=`` or
``requires_grad=True`` of the neuron tensor itself; a parameter is introduced by
``Parameter containing:`` as on CPU.
"""

from __future__ import annotations

import torch
from torch import _tensor_str as ts

__all__ = ["neuron_repr"]

_PREFIX = "tensor("


def _autograd_suffix(t: torch.Tensor) -> list[str]:
    fn = t.grad_fn
    if fn is not None:
        name = type(fn).__name__
        if name == "CppFunction":
            name = fn.name().rsplit("::", 1)[-1]
        return [f"grad_fn=<{name}>"]
    return ["requires_grad=True"] if t.requires_grad else []


def neuron_repr(t: torch.Tensor) -> str:
    """What ``repr`` shows for ``t`` (a neuron tensor with a real buffer)."""
    with torch.no_grad():
        cpu = t.detach().cpu()
    default = torch.get_default_dtype()
    suffixes = [f"device='{t.device}'"]
    if cpu.numel() == 0:
        if cpu.dim() != 1:
            suffixes.append(f"size={tuple(cpu.shape)}")
        if cpu.dtype != default:
            suffixes.append(f"dtype={cpu.dtype}")
        contents = "[]"
    else:
        if not ts.PRINT_OPTS.edgeitems:
            suffixes.append(f"size={tuple(cpu.shape)}")
        complex_default = torch.cdouble if default == torch.double else torch.cfloat
        if cpu.dtype not in (default, complex_default, torch.int64, torch.bool):
            suffixes.append(f"dtype={cpu.dtype}")
        with torch.no_grad():
            contents = ts._tensor_str(cpu, len(_PREFIX))
    suffixes += _autograd_suffix(t)
    text = ts._add_suffixes(_PREFIX + contents, suffixes, len(_PREFIX), force_newline=False)
    if getattr(t, "_is_param", False):
        return "Parameter containing:\n" + text
    return text
