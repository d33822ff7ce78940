"""Rewrites of a traced FX graph, before Torch-MLIR sees it, and its printed form.

What ``graph.prepare`` does to the functional graph once traced: write-backs into inputs
extracted, aliases and empty tensors folded, 0-d reductions folded, symbolic shapes
refused; ``format_graph`` prints the result (``PreparedGraph.graph_text``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from torchneuron.compiler.errors import PrepareError

__all__ = ["format_graph"]

aten = torch.ops.aten


def _fold_aliases(gm: fx.GraphModule) -> None:
    """`aten.alias` (from detach) is a no-op in a functional graph; keep it only where it
    is itself an output, so output aliasing stays visible."""
    out_node = _output_node(gm)
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is aten.alias.default:
            node.replace_all_uses_with(node.args[0], delete_user_cb=lambda u: u is not out_node)


_0D_REDUCTIONS = {aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default,
                  aten.amax.default, aten.amin.default, aten.prod.dim_int, aten.prod.default,
                  aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims,
                  aten.all.default}


def _fold_0d_reductions(gm: fx.GraphModule) -> None:
    """A reduction of a 0-d tensor is the identity (any/all: != 0). torch-mlir segfaults on
    these (`x.sum(dim=0)` with x 0-d), so they are rewritten before lowering."""
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _0D_REDUCTIONS:
            continue
        src, out = node.args[0], node.meta.get("val")
        if not isinstance(src, fx.Node) or not isinstance(out, torch.Tensor) or out.dim() != 0 \
                or src.meta["val"].dim() != 0:
            continue
        with gm.graph.inserting_before(node):
            if out.dtype == torch.bool and src.meta["val"].dtype != torch.bool:
                new = gm.graph.call_function(aten.ne.Scalar, (src, 0))
            elif out.dtype != src.meta["val"].dtype:
                new = gm.graph.call_function(aten._to_copy.default, (src,), {"dtype": out.dtype})
            else:
                new = gm.graph.call_function(aten.clone.default, (src,))
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)


_SCALAR_COMPARISONS = {aten.eq.Scalar, aten.ne.Scalar, aten.lt.Scalar, aten.le.Scalar,
                       aten.gt.Scalar, aten.ge.Scalar}


def _type_comparison_scalars(gm: fx.GraphModule) -> None:
    """Give ``aten.<cmp>.Scalar`` of a constant tensor a number of the tensor's kind.

    Torch-MLIR folds the comparison of a constant tensor (a ``scalar_tensor``, a ``full``)
    with a number by reading the tensor's elements as the *number's* kind: a float32
    constant compared with the int 0 has its float read as an integer attribute, so
    ``scalar_tensor(0.1) < 0`` (from ``x // 0.1``) folded to true or false by whatever
    memory it read, and a bool or integer constant compared with a float could crash the
    process. So, as eager computes it, the comparison's dtype decides: a float constant
    gets its number as a float (its exact value in that dtype); an integer or bool
    constant compared with a float is converted to the float dtype first; a bool constant
    compared with an integer is compared as int64. A tensor computed from the inputs is
    never folded and keeps its graph (and its program) as it was."""
    constant: dict[fx.Node, bool] = {}
    for node in gm.graph.nodes:  # (topological: a node's inputs are decided before it)
        ins = node.all_input_nodes
        constant[node] = node.op in ("call_function", "get_attr") and all(constant[n] for n in ins)
        if node.op != "call_function" or node.target not in _SCALAR_COMPARISONS:
            continue
        src, other = node.args[0], node.args[1]
        val = src.meta.get("val") if isinstance(src, fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.is_complex() or not constant[src] or \
                type(other) not in (bool, int, float):
            continue
        if val.dtype.is_floating_point:
            if type(other) is not float:
                node.args = (src, torch.tensor(other, dtype=val.dtype).item())
            continue
        if type(other) is float or val.dtype == torch.bool:
            common = torch.result_type(val, other) if type(other) is float else torch.int64
            with gm.graph.inserting_before(node):
                cast = gm.graph.call_function(aten._to_copy.default, (src,), {"dtype": common})
            cast.meta["val"] = val.to(common)
            constant[cast] = True
            node.args = (cast, other if type(other) is float else int(other))


def _mutates_intermediates(gm: fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
                and node.target._schema.is_mutable:
            if node.target is aten.copy_.default and node.args[0].op == "placeholder":
                continue
            return True
    return False


def _returned_scalar(node: fx.Node) -> bool:
    """``.item()`` whose only use is being returned."""
    return node.target is aten._local_scalar_dense.default and \
        all(u.op == "output" for u in node.users)


def _reject_symbolic(gm: fx.GraphModule) -> None:
    """Fake tracing gives data-dependent results unbacked symbols instead of failing; a
    static-shape executable cannot express them, except a python number only returned."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) and \
                not _returned_scalar(node):
            raise PrepareError(f"{node.target} produces a python number computed from tensor "
                               "data; a compiled graph cannot branch on data. It runs eagerly.",
                               op=str(node.target), reason="data-dependent")
        if isinstance(val, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in val.shape):
            raise PrepareError(f"{node.target} has an output shape that depends on input "
                               "values; static-shape compilation cannot express it. It runs "
                               "eagerly.", op=str(node.target), reason="dynamic-output-shape")


def _extract_write_backs(gm: fx.GraphModule) -> dict[int, fx.Node]:
    """Remove `copy_(input, value)` nodes; return {input index: value node}."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    sources: dict[int, fx.Node] = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target is aten.copy_.default and node.args[0] in placeholders:
            ph, src = node.args[0], node.args[1]
            idx = placeholders.index(ph)
            node.replace_all_uses_with(ph)
            gm.graph.erase_node(node)
            want = ph.meta["val"]
            if isinstance(src, fx.Node) and tuple(src.meta["val"].shape) == tuple(want.shape) \
                    and src.meta["val"].dtype == want.dtype:
                sources[idx] = src
                continue
            with gm.graph.inserting_before(_output_node(gm)):  # broadcast / cast like copy_
                fixed = gm.graph.call_function(aten.copy.default, (ph, src))
            fixed.meta["val"] = want
            sources[idx] = fixed
        elif node.target._schema.is_mutable:
            raise PrepareError(f"{node.target} still mutates a tensor after functionalization; "
                               "expected a functional graph.", op=str(node.target),
                               reason="mutation-left")
    return sources


def _output_node(gm: fx.GraphModule) -> fx.Node:
    return next(n for n in reversed(gm.graph.nodes) if n.op == "output")


def _view_root(node: fx.Node) -> fx.Node:
    while (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
           and node.target.is_view and isinstance(node.args[0], fx.Node)):
        node = node.args[0]
    return node


def _fold_empty(gm: fx.GraphModule) -> None:
    """A computed tensor with no elements holds no values: it becomes ``aten.full`` of its
    shape, and whatever computed it is dropped. Torch-MLIR miscomputes slices and selects
    that produce (or read) zero-size dims (``diff`` with ``n`` past the size, ``cholesky_solve``
    of a zero batch), failing to lower graphs whose outputs are empty anyway. An output
    that is a view of an input keeps its node (its aliasing is part of the result)."""
    out_node = _output_node(gm)
    for node in list(gm.graph.nodes):
        val = node.meta.get("val")
        if node.op != "call_function" or not isinstance(val, torch.Tensor) or val.numel() != 0 \
                or node.target is aten.full.default:
            continue
        keep_output = _view_root(node).op == "placeholder"
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(aten.full.default, (list(val.shape), 0),
                                         {"dtype": val.dtype, "device": val.device})
        new.meta["val"] = val
        node.replace_all_uses_with(
            new, delete_user_cb=lambda u, keep=keep_output: not (keep and u is out_node))


def format_graph(gm: fx.GraphModule) -> str:
    """One line per node: ``%mm: f32[4, 3] = aten.mm.default(%x, %w)`` (STYLE.md)."""
    lines = []
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        ty = (f"{str(val.dtype).removeprefix('torch.')}{list(val.shape)}"
              if isinstance(val, torch.Tensor) else "")
        if n.op == "placeholder":
            lines.append(f"%{n.name}: {ty} = input")
        elif n.op == "output":
            lines.append("return " + ", ".join(f"%{a.name}" for a in n.args[0]))
        else:
            args = ", ".join(_fmt_arg(a) for a in n.args)
            kw = "".join(f", {k}={_fmt_arg(v)}" for k, v in n.kwargs.items())
            lines.append(f"%{n.name}: {ty} = {n.target}({args}{kw})")
    return "\n".join(lines)


def _fmt_arg(a: Any) -> str:
    if isinstance(a, fx.Node):
        return f"%{a.name}"
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(_fmt_arg(x) for x in a) + "]"
    return repr(a)
