"""Undo Dynamo's rewrites that change eager's numbers, before AOTAutograd sees the graph.

Dynamo rewrites a few optimizer ops itself, to keep a Python number from breaking the
graph (``torch._dynamo.config.enable_dynamo_decompositions``, and ``torch.addcdiv``
always); its own config notes "this can affect numerics for non-inductor backends":

- ``x.addcmul_(t1, t2, value=v)`` -> ``fma(t1 * t2, v, x)`` and ``x.addcdiv_(t1, t2,
  value=v)`` -> ``fma(t1 / t2, v, x)`` (inductor's prim). Eager computes ``x + (v * t1)
  * t2`` with the last multiply-add fused and ``x + (v * t1) / t2``: other roundings.
  The compile worker refused the prim (``worker:bad-request``) and the eager fallback
  ran it as ``(a * b) + c``, which is neither. They become ``torch.addcmul`` /
  ``torch.addcdiv`` again: eager's kernels in a fallback, ``decomp.addc``'s lowering
  when compiled (eager's order and opmath; addcmul's fused last step is not emulated).
- ``torch.addcdiv(x, t1, t2, value=v)`` -> ``x + (t1 / t2) * v``: back to one
  ``torch.addcdiv``. Only Dynamo's own chain is undone (``torch.div``, ``torch.mul`` by
  a number, ``torch.add``, one after another, each used once by the next, from a source
  line that calls ``addcdiv`` or from one call expression: ``torch.addcdiv`` under
  another name, as OpInfo calls it); a user's ``x + a / b * v`` traces as operators.
- ``x.add_(y, alpha=t)`` with a tensor ``t`` -> ``fma(y, t, x)``. Eager reads ``t`` and
  fuses ``x + t * y`` into one rounding. The graph runs eagerly with eager's own
  ``add(x, y, alpha=t.item())`` in the prim's place (the caller counts why: the
  prim's eager form, ``(a * b) + c``, rounds twice).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

__all__ = ["undo_dynamo_rewrites"]

_FMA = torch.ops.prims.fma.default if hasattr(torch.ops.prims, "fma") else None


def undo_dynamo_rewrites(gm: fx.GraphModule) -> str | None:
    """Rewrite ``gm`` in place; None, or why it must run eagerly (its rewritten form
    is then eager's, op for op)."""
    if not any(n.op == "call_function" and n.target in (_FMA, torch.add) for n in gm.graph.nodes):
        return None
    eager_only = _undo_addc_fma(gm)
    eager_only = _undo_addcdiv(gm) or eager_only
    eager_only = _undo_tensor_alpha_fma(gm) or eager_only
    gm.recompile()
    return eager_only


_VALUE_IN_GRAPH = ("{op} with a value that is a graph input (a Python float Dynamo made "
                   "symbolic after it changed, or a tensor) is not lowered: it runs eagerly "
                   "on the device with eager's {op}")


def _number(value: Any) -> Any:
    """A ``value=`` read as eager reads it: a tensor's number, a symbolic float's float."""
    return value.item() if isinstance(value, torch.Tensor) else value


def addcmul_with_value(self: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, value: Any
                       ) -> torch.Tensor:
    """Eager's ``addcmul`` with a value that was a graph node."""
    return torch.addcmul(self, t1, t2, value=_number(value))


def addcdiv_with_value(self: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, value: Any
                       ) -> torch.Tensor:
    """Eager's ``addcdiv`` with a value that was a graph node."""
    return torch.addcdiv(self, t1, t2, value=_number(value))


_ADDC = {torch.mul: ("addcmul", torch.addcmul, addcmul_with_value),
         torch.div: ("addcdiv", torch.addcdiv, addcdiv_with_value)}


def _undo_addc_fma(gm: fx.GraphModule) -> str | None:
    eager_only = None
    for node in list(gm.graph.nodes):
        if _FMA is None or node.op != "call_function" or node.target is not _FMA:
            continue
        prod, value, self_ = node.args
        if not isinstance(prod, fx.Node) or prod.op != "call_function" \
                or len(prod.args) != 2 or prod.kwargs or prod.target not in _ADDC:
            continue
        name, op, with_value = _ADDC[prod.target]
        if isinstance(value, fx.Node):
            # ``add_(a * b, alpha=t)`` is an fma of a product too: only the user's own
            # ``addcmul_`` / ``addcdiv_`` line is one of these
            if name not in (node.meta.get("stack_trace") or ""):
                continue
            op, kwargs, args = with_value, {}, (self_, *prod.args, value)
            eager_only = _VALUE_IN_GRAPH.format(op=name)
        else:
            kwargs, args = {"value": value}, (self_, *prod.args)
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(op, args, kwargs)
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        if not prod.users:
            gm.graph.erase_node(prod)
    return eager_only


def _undo_addcdiv(gm: fx.GraphModule) -> str | None:
    eager_only = None
    for add in list(gm.graph.nodes):
        if add.op != "call_function" or add.target is not torch.add or len(add.args) != 2 \
                or add.kwargs:
            continue
        mul = add.args[1]
        if not _chained(mul, torch.mul, add) or isinstance(mul.args[1], bool) \
                or not isinstance(mul.args[1], (int, float, fx.Node)):
            continue
        div = mul.args[0]
        between = mul.args[1] if isinstance(mul.args[1], fx.Node) else None
        if not _chained(div, torch.div, mul, between):
            continue
        trace = add.meta.get("stack_trace") or ""
        if not ("addcdiv" in trace or _one_expression(trace)) \
                or any((n.meta.get("stack_trace") or "") != trace for n in (mul, div)):
            continue
        value = mul.args[1]
        with gm.graph.inserting_before(add):
            if isinstance(value, fx.Node):  # a float Dynamo made symbolic
                new = gm.graph.call_function(addcdiv_with_value,
                                             (add.args[0], *div.args, value))
                eager_only = _VALUE_IN_GRAPH.format(op="addcdiv")
            else:
                new = gm.graph.call_function(torch.addcdiv, (add.args[0], *div.args),
                                             {"value": value})
        new.meta = dict(add.meta)
        add.replace_all_uses_with(new)
        for n in (add, mul, div):
            gm.graph.erase_node(n)
    return eager_only


def _one_expression(trace: str) -> bool:
    """Whether a stack trace ends in a caret line (Python marks the span of the
    expression that made the node). Three nodes with that same trace, carets included,
    come from one call: ``torch.addcdiv`` called through another name (OpInfo's
    ``op(*args)``, ``f = torch.addcdiv``), where a user's own ``torch.add(x,
    torch.mul(torch.div(a, b), v))`` marks a different span for each of its calls."""
    lines = [ln.strip() for ln in trace.splitlines() if ln.strip()]
    return bool(lines) and set(lines[-1]) <= {"^", "~"}


def _chained(node: Any, target: Any, user: fx.Node, between: fx.Node | None = None) -> bool:
    """``node`` is a call of ``target`` with two arguments, no keywords, used only by
    ``user``, which comes right after it (or right after ``between``: the ``value.item()``
    Dynamo reads a symbolic float with)."""
    follows = node.next is user or (between is not None and node.next is between
                                    and between.next is user) \
        if isinstance(node, fx.Node) else False
    return isinstance(node, fx.Node) and node.op == "call_function" \
        and node.target is target and len(node.args) == 2 and not node.kwargs \
        and list(node.users) == [user] and follows


def add_with_item_alpha(other: torch.Tensor, alpha: torch.Tensor, self: torch.Tensor
                        ) -> torch.Tensor:
    """Eager's ``add_`` with a tensor alpha: the alpha read as a number."""
    return torch.add(self, other, alpha=_number(alpha))


def _undo_tensor_alpha_fma(gm: fx.GraphModule) -> str | None:
    """Every fma left is ``add_`` with a tensor alpha: eager's add in its place, and the
    reason the graph runs eagerly (None when there is none)."""
    eager_only = None
    for node in gm.graph.nodes:
        if _FMA is None or node.op != "call_function" or node.target is not _FMA:
            continue
        node.target = add_with_item_alpha
        eager_only = ("add_ with a tensor alpha (traced by Dynamo as a fused multiply-add "
                      "prim, which eager computes from the alpha's value with one rounding) "
                      "is not lowered, so the graph runs eagerly on the device")
    return eager_only
