"""An in-place op's result keeps its tensor's layout in the traced graph, as in eager.

Why: prepare traces under ``torch.func.functionalize``, which writes ``t.op_(...)`` as the
out-of-place ``op(t, ...)`` and takes its result as ``t``'s new value, in the layout the
out-of-place op gives. Eager's in-place op writes into ``t``, whose layout never changes.
Several out-of-place ops lay their result out contiguous (``masked_fill``,
``masked_scatter``, ``scatter``, ``index_copy``, ``index_add``, ``put``, ``tril``,
``renorm``), so after one of these on a transposed or channels-last tensor the graph's
values had another layout than eager's, and the calls of eager's kernels behind it were
handed their operands in that layout (``stablehlo/operand_layout``): a ``gelu`` after
``masked_fill_`` of a transposed tensor was off in 882 of 2310 float32 elements, and a
replayed training step whose ``vector_norm`` backward ran ``masked_fill_`` on a
transposed gradient diverged at its checked replay (an ``mm`` behind ``softplus_backward``).

``InPlaceLayouts``, a TorchFunctionMode entered around the function prepare traces, writes
such a call, where the out-of-place op's result is laid out otherwise than the tensor,
as ``t.copy_(op(t, ...))``: functionalization's ``copy`` keeps ``t``'s strides. The values
are the op's; other in-place calls are left as they are. Imports torch only.

A mode sees only Python calls: the in-place ops inside autograd's C++ derivative formulas
(``vector_norm``'s backward runs ``masked_fill_`` on ``grad / norm``, laid out as its
input) reach AOTAutograd's backward graph already functionalized, as PyTorch's
``masked_fill`` reference writes it: ``where(mask, value, t).contiguous()``. There the
graph cannot tell an in-place fill (eager keeps ``t``'s layout) from an out-of-place one
(eager's result is contiguous), so ``lost_inplace_layout`` finds that pattern on a
non-contiguous ``t`` in AOTAutograd's joint graph, and the backend then runs Dynamo's
graph eagerly (a transposed ``vector_norm``'s input gradient was off in 25 of 396 float32
elements under ``torch.compile``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["InPlaceLayouts", "lost_inplace_layout"]

aten = torch.ops.aten
_SKIPPED_TAGS = (torch.Tag.inplace_view, torch.Tag.nondeterministic_seeded)
_SKIPPED = frozenset({"copy_", "set_", "resize_", "resize_as_", "detach_"})  # (not values)


def _packet_of(func: Any) -> Any:
    """The aten overload packet of an in-place call (an overload or a Tensor method)."""
    if isinstance(func, torch._ops.OpOverload):
        return func.overloadpacket
    name = getattr(func, "__name__", "")
    return getattr(aten, name, None) if name.endswith("_") and not name.startswith("_") \
        else None


def _out_of_place(func: Any) -> Any:
    """The out-of-place form of an in-place aten call (same overload or Tensor method),
    or None: not in place, an in-place view or random op, or no out-of-place form."""
    packet = _packet_of(func)
    if packet is None or not packet.__name__.endswith("_") or packet.__name__ in _SKIPPED:
        return None
    overloads = [getattr(packet, o) for o in packet.overloads()]
    if any(tag in op.tags for op in overloads for tag in _SKIPPED_TAGS):
        return None
    name = packet.__name__[:-1]
    if isinstance(func, torch._ops.OpOverload):
        functional = getattr(aten, name, None)
        return getattr(functional, func._overloadname, None) if functional is not None \
            else None
    return getattr(torch.Tensor, name, None)


class InPlaceLayouts(TorchFunctionMode):
    """While inside: an in-place call on a non-contiguous tensor whose out-of-place form
    lays its result out otherwise is ``t.copy_(out_of_place(t, ...))``."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        self_ = args[0] if args else None
        if not isinstance(self_, torch.Tensor) or self_.layout != torch.strided \
                or self_.is_contiguous():
            return func(*args, **kwargs)
        functional = _out_of_place(func)
        if functional is None:
            return func(*args, **kwargs)
        try:
            out = functional(*args, **kwargs)
        except Exception:  # noqa: BLE001 - the in-place call raises eager's error, or runs
            return func(*args, **kwargs)
        if not isinstance(out, torch.Tensor) or out.shape != self_.shape \
                or out.dtype != self_.dtype or out.stride() == self_.stride():
            return func(*args, **kwargs)  # (the out-of-place result is left unused)
        return self_.copy_(out)


def lost_inplace_layout(gm: torch.fx.GraphModule) -> str | None:
    """The name of a node in ``gm`` that makes a non-contiguous ``where`` result contiguous
    (``masked_fill``'s functional form, which may stand for an in-place fill that kept the
    layout), or None."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not aten.clone.default:
            continue
        if node.kwargs.get("memory_format") is not torch.contiguous_format:
            continue
        src = node.args[0]
        if not isinstance(src, torch.fx.Node) or src.target is not aten.where.self:
            continue
        val = src.meta.get("val")
        if isinstance(val, torch.Tensor) and not val.is_contiguous():
            return node.name
    return None

