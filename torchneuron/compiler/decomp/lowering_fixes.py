"""Decompositions that replace lowerings which compiled but gave numbers unlike eager's.

Each entry here fixes a case found by ``tools/lowering_coverage.py`` where Torch-MLIR
lowered an aten op to StableHLO with different semantics from ATen's CPU kernel:

- ``remainder``: lowered to ``stablehlo.remainder``, which is C ``fmod`` (sign of the
  dividend); Python/ATen ``remainder`` takes the sign of the divisor.
- ``index.Tensor`` (``x[idx]``, ``take``): lowered to ``stablehlo.gather``, which clamps
  out-of-range starts instead of wrapping negative indices as ATen does.
- ``avg_pool3d`` with ``divisor_override``: the lowering ignores the override.
- ``var`` / ``var_mean`` / ``std_mean`` / ``std`` with no more elements than the correction:
  the lowering gives -0.0; eager divides the sum of squares by 0 (NaN or inf), which is
  what these graphs now compute.
- ``_scaled_dot_product_flash_attention_for_cpu`` (what SDPA picks on CPU) is tagged
  random, so it was refused; with ``dropout_p == 0`` it draws nothing and PyTorch's own
  decomposition (math attention) is exact.
- ``slice_scatter`` with an end past the dimension (``x[..., 8:]``'s backward records end
  ``2**63 - 1``): Torch-MLIR sizes its result from the unclamped end and runs out of
  memory or fails with no diagnostic (the Llama backward graph's rotary embedding).
  Bounds are clamped to the dimension as ATen does.

Imported for its side effect by ``decompositions.decomposition_table``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import Lowering
from torchneuron.compiler.decomp.table import _register

__all__: list[str] = []

aten = torch.ops.aten


# --------------------------------------------------------------------------- remainder


def _python_remainder(r: torch.Tensor, divisor: Any) -> torch.Tensor:
    """fmod result ``r`` -> remainder: add the divisor where the signs disagree."""
    fix = (r != 0) & ((r < 0) != (divisor < 0))
    return torch.where(fix, r + divisor, r)


@_register(aten.remainder.Tensor)
def remainder(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _python_remainder(torch.fmod(a, b), b)


@_register(aten.remainder.Scalar)
def remainder_scalar(a: torch.Tensor, b: Any) -> torch.Tensor:
    # fmod.Scalar does not lower; a 0-d divisor does
    rhs = torch.scalar_tensor(b, dtype=torch.result_type(a, b), device=a.device)
    if rhs.dtype == torch.uint8:  # eager wraps the divisor to uint8 (-3 -> 253) first
        b = int(b) % 256
    return _python_remainder(torch.fmod(a, rhs), b)


@_register(aten.remainder.Scalar_Tensor)
def remainder_scalar_tensor(a: Any, b: torch.Tensor) -> torch.Tensor:
    dtype = torch.result_type(a, b)
    lhs = torch.full_like(b, a, dtype=dtype)
    return _python_remainder(torch.fmod(lhs, b), b)


# --------------------------------------------------------------------------- indexing

_guard = Lowering()


@_register(aten.index.Tensor)
def index(x: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> Any:
    """Wrap negative integer indices (``i + size``) before the lowering's gather.

    Calls ``aten.index.Tensor`` again with the wrapped indices; the thread-local guard
    makes that inner call return NotImplemented here, so tracing records the op itself.
    """
    if _guard.active:
        return NotImplemented
    if any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in indices):
        return NotImplemented  # a mask spans several dims; masks are data-dependent anyway
    wrapped = [None if idx is None else torch.where(idx < 0, idx + x.shape[dim], idx)
               for dim, idx in enumerate(indices)]
    with _guard.inside():
        return aten.index.Tensor(x, wrapped)


# --------------------------------------------------------------------------- pooling


def _triple(v: Any, default: Any = None) -> tuple[int, int, int]:
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        v = default
    if isinstance(v, int):
        return (v, v, v)
    v = list(v)
    return (v[0], v[0], v[0]) if len(v) == 1 else (v[0], v[1], v[2])


def _pool_out(size: int, k: int, s: int, p: int, ceil: bool) -> int:
    out = (size + 2 * p - k + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1  # the last window must start inside the input or the left padding
    return out


@_register(aten.avg_pool3d.default)
def avg_pool3d(x: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Any:
    """Window sums (a ones-kernel convolution over the padded input, ceil-mode overhang
    padded with zeros) divided by ``divisor_override``, or by ATen's count: the same
    convolution over ones, with the padding counted only under ``count_include_pad`` and
    the overhang never. Used where the lowering is wrong (it ignores the override) or
    fails (a ceil-mode window that adds an output); otherwise the op is kept."""
    k = _triple(kernel_size)
    s = _triple(stride, k)
    p = _triple(padding, 0)
    spatial = x.shape[-3:]
    outs = [_pool_out(n, kk, ss, pp, ceil_mode) for n, kk, ss, pp in zip(spatial, k, s, p, strict=True)]
    floors = [_pool_out(n, kk, ss, pp, False) for n, kk, ss, pp in zip(spatial, k, s, p, strict=True)]
    if not divisor_override and outs == floors:
        return NotImplemented
    extra = [max(0, (o - 1) * ss + kk - n - 2 * pp)
             for o, ss, kk, n, pp in zip(outs, s, k, spatial, p, strict=True)]
    ones = torch.ones((1, 1, *k), dtype=x.dtype, device=x.device)

    def window_sums(t: torch.Tensor, pad_value: float) -> torch.Tensor:
        padded = aten.constant_pad_nd(t, [p[2], p[2], p[1], p[1], p[0], p[0]], pad_value)
        padded = aten.constant_pad_nd(padded, [0, extra[2], 0, extra[1], 0, extra[0]], 0.0)
        out = torch.nn.functional.conv3d(padded, ones, stride=s)
        return out[..., : outs[0], : outs[1], : outs[2]]

    sums = window_sums(x.reshape(-1, 1, *spatial), 0.0)
    if divisor_override:
        div: Any = divisor_override
    else:
        div = window_sums(torch.ones((1, 1, *spatial), dtype=x.dtype, device=x.device),
                          1.0 if count_include_pad else 0.0)
    return (sums / div).reshape(*x.shape[:-3], *outs)


# --------------------------------------------------------------------------- attention


@_register(aten._scaled_dot_product_flash_attention_for_cpu.default)
def flash_attention_for_cpu(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            dropout_p: float = 0.0, is_causal: bool = False, *,
                            attn_mask: torch.Tensor | None = None,
                            scale: float | None = None) -> Any:
    """Math attention when nothing is drawn; with dropout the kernel's own draws cannot be
    reproduced, so the op stays (and random_ops refuses it)."""
    if dropout_p != 0.0:
        return NotImplemented
    from torch._decomp import decomposition_table as torch_table

    fn = torch_table[aten._scaled_dot_product_flash_attention_for_cpu.default]
    return fn(query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)


# --------------------------------------------------------------------------- var_mean


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


# --------------------------------------------------------------------------- slice_scatter


def _clamp_bound(v: int | None, size: int, default: int) -> int:
    if v is None:
        return default
    v = v + size if v < 0 else v
    return min(max(v, 0), size)


@_register(aten.slice_scatter.default)
def slice_scatter(x: torch.Tensor, src: torch.Tensor, dim: int = 0, start: int | None = None,
                  end: int | None = None, step: int = 1) -> Any:
    """The same op with ``start``/``end`` clamped to ``[0, size]`` as ATen's kernel does;
    already-clamped bounds return ``NotImplemented`` so tracing records the op itself."""
    size = x.shape[dim]
    lo = _clamp_bound(start, size, 0)
    hi = max(_clamp_bound(end, size, size), lo)
    if (start, end) == (lo, hi):
        return NotImplemented
    return aten.slice_scatter.default(x, src, dim, lo, hi, step)


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


# --------------------------------------------------------------------------- argmax / argmin

_INSIDE_ARG_REDUCTION = [False]


def _nan_first(op: Any, x: torch.Tensor, dim: int | None, keepdim: bool) -> Any:
    """ATen's argmax/argmin pick the first NaN when there is one; the lowering compares
    without NaN and gives the index of the largest (smallest) number. The op itself, then
    the index of the first NaN wherever the reduced slice holds one."""
    if _INSIDE_ARG_REDUCTION[0] or not x.is_floating_point():
        return NotImplemented
    if x.dim() == 0:  # the only index there is
        return torch.zeros((), dtype=torch.int64, device=x.device)
    _INSIDE_ARG_REDUCTION[0] = True
    try:
        plain = op(x, dim, keepdim)
    finally:
        _INSIDE_ARG_REDUCTION[0] = False
    v = x.reshape(-1) if dim is None else x
    d = 0 if dim is None else dim
    n = v.shape[d]
    shape = [1] * v.dim()
    shape[d] = n
    pos = torch.arange(n, device=x.device).reshape(shape).expand(v.shape)
    first = torch.where(torch.isnan(v), pos, torch.full_like(pos, n)).amin(d, keepdim=keepdim)
    if dim is None:
        first = first.reshape([1] * x.dim() if keepdim else [])
    return torch.where(first < n, first, plain)


@_register(aten.argmax.default)
def argmax(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    return _nan_first(aten.argmax.default, x, dim, keepdim)


@_register(aten.argmin.default)
def argmin(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    return _nan_first(aten.argmin.default, x, dim, keepdim)
