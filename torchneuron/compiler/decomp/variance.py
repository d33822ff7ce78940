"""Variances over no more elements than their correction, as eager computes them.

``var`` / ``var_mean`` / ``std_mean`` / ``std`` with no more elements than the
correction: the lowering gives -0.0; eager divides the sum of squares by 0 (NaN or inf),
which is what these graphs now compute.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["VARIANCE_DECOMPOSITIONS", "fix_degenerate_variances"]

aten = torch.ops.aten
VARIANCE_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(VARIANCE_DECOMPOSITIONS)


def _reduced_dims(x: torch.Tensor, dim: Any) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return list(range(x.dim()))
    return [dim] if isinstance(dim, int) else list(dim)


def _degenerate(x: torch.Tensor, dim: Any, correction: Any) -> bool:
    """A variance over no more elements than the correction: eager divides the sum of
    squares M2 by max(0, N - correction) = 0 (NaN or inf); the lowering gives -0.0. The
    sizes are static, so this is known while tracing."""
    n = 1
    for d in _reduced_dims(x, dim):
        n *= x.shape[d] if x.dim() else 1
    corr = 1 if correction is None else correction
    return n - corr <= 0


def _degenerate_var_mean(x: torch.Tensor, dim: Any, keepdim: bool
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """ATen's result when N <= correction: M2 / 0 (NaN where M2 is 0, inf elsewhere), and
    the mean (NaN over no elements)."""
    dims = _reduced_dims(x, dim) if x.dim() else []
    if not dims:
        m2 = (x - x) * (x - x)
        return m2 / 0.0, x.clone()
    mean = aten.mean.dim(x, dims, True)
    m2 = ((x - mean) * (x - mean)).sum(dims, keepdim=keepdim)
    return m2 / 0.0, (mean if keepdim else mean.squeeze(dims))


def fix_degenerate_variances(gm: torch.fx.GraphModule) -> None:
    """Every ``var.correction`` left in a traced graph (it lowers as is; registering a
    decomposition for it would change every graph that holds it, LayerNorm's among them)
    over no more elements than its correction is replaced by eager's M2 / 0."""
    from torch.fx.experimental.proxy_tensor import make_fx

    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.var.correction:
            continue
        x = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
        if not isinstance(x, torch.Tensor):
            continue
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if not _degenerate(x, dim, node.kwargs.get("correction")):
            continue
        keepdim = bool(node.kwargs.get("keepdim", False))
        def degenerate(t: torch.Tensor, d: Any = dim, k: bool = keepdim) -> torch.Tensor:
            return _degenerate_var_mean(t, d, k)[0]

        sub = make_fx(functools.partial(degenerate, d=dim, k=keepdim), tracing_mode="fake")(x)
        (ph,) = [n for n in sub.graph.nodes if n.op == "placeholder"]
        with gm.graph.inserting_before(node):
            out = gm.graph.graph_copy(sub.graph, {ph: node.args[0]})
        node.replace_all_uses_with(out)  # type: ignore[arg-type]
        gm.graph.erase_node(node)
    gm.recompile()


@_register(aten.var_mean.correction)
def var_mean(x: torch.Tensor, dim: Any = None, *, correction: Any = None,
             keepdim: bool = False) -> Any:
    """Degenerate: eager's M2 / 0; otherwise ``NotImplemented``: tracing keeps
    ``var_mean``, which lowers as is."""
    if _degenerate(x, dim, correction):
        return _degenerate_var_mean(x, dim, keepdim)
    return NotImplemented


@_register(aten.std_mean.correction)
def std_mean(x: torch.Tensor, dim: Any = None, *, correction: Any = None,
             keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``sqrt`` of ``var_mean`` (PyTorch's own decomposition of std_mean)."""
    if _degenerate(x, dim, correction):
        var, mean = _degenerate_var_mean(x, dim, keepdim)
    else:
        var, mean = aten.var_mean.correction(x, dim, correction=correction, keepdim=keepdim)
    return var.sqrt(), mean


@_register(aten.std.correction)
def std(x: torch.Tensor, dim: Any = None, *, correction: Any = None,
        keepdim: bool = False) -> torch.Tensor:
    """Degenerate: sqrt of eager's M2 / 0; otherwise PyTorch's own decomposition (``var`` is
    fixed by fix_degenerate_variances; a check on ``var.correction`` itself changed compiled
    LayerNorm programs)."""
    from torch._decomp import decomposition_table as torch_table

    if _degenerate(x, dim, correction):
        return _degenerate_var_mean(x, dim, keepdim)[0].sqrt()
    return torch_table[aten.std.correction](x, dim, correction=correction, keepdim=keepdim)
