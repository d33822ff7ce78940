"""The layout eager's kernel gives its outputs, where PyTorch's fake kernel says another.

Why: a call of eager's kernel in a program is handed its operands in the strides the
graph's values say eager's had (``stablehlo/operand_layout``), and those values come from
PyTorch's fake kernels. For a strided operand some fake kernels lay their outputs out
otherwise than the CPU kernel: ``native_batch_norm_backward`` of a contiguous gradient
and a channels-last input gives a channels-last input gradient on the CPU and a
contiguous one in its fake. Every value after it then had the wrong layout, so the
``gelu_backward`` and the weight gradient's sum behind it were handed contiguous operands
and summed in another order (a replayed channels-last training step diverged at its
checked replay and was blacklisted).

- ``kernel_output_strides(op, args, kwargs)``: the strides of eager's kernel's outputs
  on zeros laid out as the operands are, when some operand is strided (with contiguous
  operands the kernels and their fakes agree), else None;
- ``refresh_values(gm)``: the graph's values propagated again from its inputs (after a
  carrier declared the kernel's layout), so later calls see eager's layouts;
- ``fake_strides_differ(gm)``: an elementwise node of an ATen graph whose traced strides
  are not its CPU kernel's (``torch.compile``'s backend then runs Dynamo's graph eagerly:
  an AOTAutograd graph's ``view`` calls are planned on the fake's strides, and a
  ``softplus_backward`` of a contiguous gradient and a transposed input, transposed in its
  fake and contiguous on the CPU, made the backward's ``view`` impossible).

Imports torch and ``stablehlo.operand_layout``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from torchneuron.compiler.stablehlo.operand_layout import in_layout, layout_of

__all__ = ["kernel_output_strides", "refresh_values", "fake_strides_differ"]

_MAX_ELEMENTS = 1 << 24  # (a larger call keeps its fake's layout: the probe is a real run)


def _probe(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return in_layout(torch.zeros(v.shape, dtype=v.dtype), layout_of(v))
    if isinstance(v, (list, tuple)):
        return type(v)(_probe(x) for x in v)
    return v


def _tensors(v: Any) -> list[torch.Tensor]:
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in _tensors(x)]
    return []


def kernel_output_strides(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                          ) -> list[tuple[int, ...] | None] | None:
    """The strides of each output of eager's ``op`` on operands laid out as ``args``'
    (fake) tensors are, None for an output that is not a tensor; None when every operand
    is contiguous, the operands are too large to run, or the kernel raises."""
    from torch.utils._python_dispatch import _disable_current_modes

    tensors = _tensors([args, list(kwargs.values())])
    if all(layout_of(t) is None for t in tensors) \
            or sum(t.numel() for t in tensors) > _MAX_ELEMENTS:
        return None
    with _disable_current_modes():
        try:
            out = op(*_probe(args), **{k: _probe(v) for k, v in kwargs.items()})
        except Exception:  # noqa: BLE001 - zeros the kernel refuses: keep the fake's layout
            return None
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [tuple(o.stride()) if isinstance(o, torch.Tensor) else None for o in outs]


def refresh_values(gm: fx.GraphModule) -> bool:
    """Propagate the graph's fake values again from its inputs' (True when it could)."""
    from torch._guards import detect_fake_mode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    inputs = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode([v for v in inputs if isinstance(v, torch.Tensor)])
    if mode is None:
        return False
    try:
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*inputs)
    except Exception:  # noqa: BLE001 - a graph fake propagation cannot run keeps its values
        return False
    return True


def fake_strides_differ(gm: fx.GraphModule) -> str | None:
    """The name of an elementwise node of ``gm`` (every tensor operand of the output's
    shape) whose traced output strides are not those eager's kernel gives on operands laid
    out as the traced ones (``kernel_output_strides``), or None. Only nodes whose tensor
    operands have different strides are run: there the fake tensors and TensorIterator
    may choose the output's layout differently."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        val = node.meta.get("val")
        args, kwargs = fx.map_arg((node.args, node.kwargs), lambda a: a.meta.get("val"))
        tensors = _tensors([args, list(kwargs.values())])
        if not isinstance(val, torch.Tensor) or len({t.stride() for t in tensors}) < 2 \
                or any(t.shape != val.shape for t in tensors):  # (not views, products)
            continue
        strides = kernel_output_strides(node.target, args, kwargs)
        if strides is not None and strides[0] != tuple(val.stride()):
            return node.name
    return None
