"""View-like ops functionalization or this torch-mlir cannot take: the view prims
core decompositions emit, ``unfold`` (whose lowering segfaults torch-mlir),
``diagonal_scatter`` and ``slice_scatter`` with bounds past the dimension.

``slice_scatter`` with an end past the dimension (``x[..., 8:]``'s backward records end
``2**63 - 1``): Torch-MLIR sizes its result from the unclamped end and runs out of memory
or fails with no diagnostic (the Llama backward graph's rotary embedding). Bounds are
clamped to the dimension as ATen does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchneuron.compiler.decomp.registry import registrar

__all__ = ["VIEW_DECOMPOSITIONS"]

aten = torch.ops.aten
VIEW_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {}
_register = registrar(VIEW_DECOMPOSITIONS)


# --------------------------------------------------------------------------- prims
# Core decompositions (nll_loss_forward among them) emit prims.squeeze, a view prim that
# functionalization refuses ("custom operator whose output has alias annotations").
@_register(torch.ops.prims.squeeze.default)
def prims_squeeze(x: torch.Tensor, dimensions: Sequence[int]) -> torch.Tensor:
    # Not aten.squeeze: its own decomposition is prims.squeeze. Dropping size-1 dims is
    # always expressible as a view.
    drop = {d % max(x.dim(), 1) for d in dimensions}
    return aten.view.default(x, [s for i, s in enumerate(x.shape) if i not in drop])


@_register(torch.ops.prims.view_of.default)
def prims_view_of(x: torch.Tensor) -> torch.Tensor:
    """Another view prim functionalization refuses (``aten.squeeze``'s reference returns it
    when no dim has size 1, as in linear_cross_entropy's chunked loop): a same-shape view."""
    return aten.view.default(x, list(x.shape))


@_register(aten.unfold.default)
def unfold(x: torch.Tensor, dim: int, size: int, step: int) -> torch.Tensor:
    """Stacked strided slices (torch-mlir segfaults on its own unfold lowering)."""
    if x.dim() == 0:
        return x.reshape(1)
    dim = dim % x.dim()
    n = (x.shape[dim] - size) // step + 1
    parts = [x.narrow(dim, i, (n - 1) * step + 1)[(slice(None),) * dim + (slice(None, None, step),)]
             for i in range(size)]
    return torch.stack(parts, dim=-1)


_register(aten.unfold_copy.default)(lambda x, d, s, st: unfold(x, d, s, st).clone())


@_register(aten.diagonal_scatter.default)
def diagonal_scatter(x: torch.Tensor, src: torch.Tensor, offset: int = 0, dim1: int = 0,
                     dim2: int = 1) -> torch.Tensor:
    xm = x.movedim((dim1, dim2), (-2, -1))
    r, c = xm.shape[-2], xm.shape[-1]
    rows = torch.arange(r, device=x.device)[:, None]
    cols = torch.arange(c, device=x.device)[None, :]
    mask = (cols - rows) == offset
    full = torch.diag_embed(src, offset, -2, -1)[..., :r, :c]
    full = aten.constant_pad_nd(full, [0, c - full.shape[-1], 0, r - full.shape[-2]], 0.0)
    return torch.where(mask, full, xm).movedim((-2, -1), (dim1, dim2))


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
