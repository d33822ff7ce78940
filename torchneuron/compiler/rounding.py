"""Is a difference between a compiled graph and eager only float32 rounding?

Some computations amplify rounding: a gradient that is zero in exact arithmetic holds
summation-order noise (1e-9), and AdamW divides it by the square root of its own square,
turning the noise into a step of about the learning rate. Eager and a compiled graph sum
in different orders, so they land on different, equally valid, numbers, and an
elementwise tolerance calls that a mismatch. The judge here is PyTorch's own accuracy
check for compiled training (``torch._dynamo.utils.same`` with ``fp64_ref``): run the
graph once more in float64 from the same inputs and random state, and accept the
compiled result when, per tensor, its largest error from that reference is at most a few
times eager's own largest error (plus the usual tolerance). A lowering that is wrong is
far from the float64 result while eager is close, so it is still refused; when the
float64 run cannot be made (an op without float64, different random draws), the
difference stays a mismatch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

__all__ = ["copy_preserving_aliases", "explained_by_rounding"]

MULTIPLIER = 3.0  # compiled may be this many times further from float64 than eager
_LOW = (torch.float32, torch.float16, torch.bfloat16)


def _up(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype in _LOW:
        return x.to(torch.float64)
    if isinstance(x, torch.dtype) and x in _LOW:
        return torch.float64
    if isinstance(x, (list, tuple)):
        return type(x)(_up(v) for v in x)
    if isinstance(x, dict):
        return {k: _up(v) for k, v in x.items()}
    return x


class _Float64(fx.Interpreter):
    """Runs a graph with every low-precision float value and dtype argument as float64.
    Inputs come in as float64 and every op keeps them so, so in-place writes land in the
    graph's own tensors (a cast argument would be a copy: never cast a written tensor)."""

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        return target(*_up(args), **_up(kwargs))


def _reference64(gm: fx.GraphModule, inputs64: list[Any], rng_state: torch.Tensor | None
                 ) -> list[Any]:
    ctx: Any = torch.random.fork_rng(devices=[]) if rng_state is not None \
        else contextlib.nullcontext()
    with ctx:
        if rng_state is not None:
            torch.default_generator.set_state(rng_state)
        outs = _Float64(gm).run(*inputs64)
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


def _within(ref: torch.Tensor, eager: torch.Tensor, got: torch.Tensor, rtol: float,
            atol: float) -> bool:
    if not eager.is_floating_point():
        return torch.equal(eager, got)
    r = ref.to(torch.float64)
    e, g = eager.to(torch.float64), got.to(torch.float64)
    finite = torch.isfinite(r)
    if not torch.equal(torch.isnan(e), torch.isnan(g)) or not torch.equal(
            e[~finite & ~torch.isnan(e)], g[~finite & ~torch.isnan(e)]):
        return False
    if not bool(finite.any()):
        return True
    r, e, g = r[finite], e[finite], g[finite]
    err_e = float((e - r).abs().max())
    err_g = float((g - r).abs().max())
    return err_g <= MULTIPLIER * err_e + atol + rtol * float(r.abs().max())


def copy_preserving_aliases(values: Sequence[Any], widen: bool = False) -> list[Any] | None:
    """Copies of ``values``' tensors that alias one another as the originals do.

    Why: a graph's inputs may share storage (a weight and its transposed view, both read
    by one training step); copied one by one, an in-place write into one would no longer
    show in the other, and a reference run would compute something eager never does. Each
    storage is copied once and every tensor on it rebuilt as the same view of the copy.

    ``widen``: low-precision floats become float64 (the judge's reference); then None
    when a storage cannot be copied faithfully (tensors of different dtypes on it, or a
    lazily conjugated / negated view). Without it, such a tensor is cloned on its own.
    """
    groups: dict[int, list[torch.Tensor]] = {}
    for v in values:
        if isinstance(v, torch.Tensor) and v.untyped_storage().nbytes():
            if v.is_conj() or v.is_neg():
                if widen:
                    return None
                continue  # cloned on its own below
            groups.setdefault(v.untyped_storage().data_ptr(), []).append(v)
    copies: dict[int, tuple[torch.UntypedStorage, torch.dtype | None]] = {}
    for ptr, ts in groups.items():
        dtype, storage = ts[0].dtype, ts[0].untyped_storage()
        if widen and any(t.dtype != dtype for t in ts):
            return None
        if widen and dtype in _LOW:
            flat = torch.empty(0, dtype=dtype).set_(storage, 0, (storage.nbytes() // dtype.itemsize,))
            copies[ptr] = (flat.to(torch.float64).untyped_storage(), torch.float64)
        else:
            copies[ptr] = (storage.clone(), None)
    out: list[Any] = []
    for v in values:
        hit = copies.get(v.untyped_storage().data_ptr()) if isinstance(v, torch.Tensor) \
            and not (v.is_conj() or v.is_neg()) else None
        if hit is not None:
            storage, dtype = hit
            out.append(torch.empty(0, dtype=dtype or v.dtype).set_(
                storage, v.storage_offset(), v.size(), v.stride()))
        elif isinstance(v, torch.Tensor):
            out.append(v.to(torch.float64) if widen and v.dtype in _LOW else v.clone())
        else:
            out.append(v)
    return out


def explained_by_rounding(gm: fx.GraphModule, inputs: Sequence[Any],
                          rng_state: torch.Tensor | None, eager: Sequence[Any],
                          got: Sequence[Any], rtol: float, atol: float) -> bool:
    """Whether ``got`` (the executable's outputs, then its inputs after its writes)
    differs from ``eager`` (the same for the eager reference) only as float32 rounding
    does. ``inputs``: the graph's arguments as they were before either run."""
    inputs64 = copy_preserving_aliases(inputs, widen=True)
    if inputs64 is None:  # no faithful float64 copy of the inputs: the mismatch stands
        return False
    try:
        outs64 = _reference64(gm, inputs64, rng_state)
    except Exception:  # noqa: BLE001 - no float64 reference: the mismatch stands
        return False
    ref = outs64 + [x for x in inputs64 if isinstance(x, torch.Tensor)]
    if len(ref) != len(eager) or len(eager) != len(got):
        return False
    for r, e, g in zip(ref, eager, got, strict=True):
        if not isinstance(e, torch.Tensor):
            continue
        if not isinstance(r, torch.Tensor) or not isinstance(g, torch.Tensor) \
                or r.shape != e.shape or g.shape != e.shape:
            return False
        if not _within(r, e, g, rtol, atol):
            return False
    return True


def grads_explained_by_rounding(gm: fx.GraphModule, inputs: Sequence[Any], wrt: Sequence[int],
                                tangents: Sequence[Any], eager: Sequence[torch.Tensor],
                                got: Sequence[torch.Tensor], rtol: float, atol: float) -> bool:
    """Gradients: whether ``got`` (of ``gm``'s outputs' vector-Jacobian product with
    ``tangents``, with respect to ``inputs[i]`` for ``i`` in ``wrt``) differs from ``eager``
    only as rounding does, judged as ``explained_by_rounding`` judges outputs, against the
    same product computed in float64 (no random state is set: the caller gives it no graph
    that draws random numbers)."""
    inputs64 = copy_preserving_aliases(inputs, widen=True)
    if inputs64 is None:
        return False
    try:
        leaves = [inputs64[i].requires_grad_() for i in wrt]
        with torch.enable_grad():
            outs = _reference64(gm, inputs64, None)
            pairs = [(o, _up(t)) for o, t in zip(outs, tangents, strict=True)
                     if isinstance(o, torch.Tensor) and o.requires_grad and t is not None]
            ref = torch.autograd.grad([o for o, _ in pairs], leaves, [t for _, t in pairs],
                                      allow_unused=True)
    except Exception:  # noqa: BLE001 - no float64 reference: the mismatch stands
        return False
    return all(r is not None and _within(r, e, g, rtol, atol)
               for r, e, g in zip(ref, eager, got, strict=True))
