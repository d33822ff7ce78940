"""An op run again on buffers, with what eager dispatch found for it the first time.

Why: adaptive eager's first tier replays a recorded sequence of ops as eager's own kernels
(CUDA Graphs replays recorded kernel launches the same way, without the per-op framework
work). Eager dispatch does that framework work on every op: it unwraps the neuron tensors,
builds the signature key from their metadata, looks up the signature's facts and wraps each
result in a new neuron tensor. In a replay the guard has already checked the metadata the
key is made of, and the intermediate values need no wrapper, so an op is run again here
on plain buffers with the facts (``Facts``) kept from its first run: the same kernel, the
same charge on the core, the same memory accounting, a fraction of the host work.

``facts_of`` says whether an op can be run so (the common case: ``OpRecord.fast``, a device
kernel or a metadata-only op, no host fallback, no device argument, no host results) and
``rerun`` runs it. Anything else goes through ``run_op`` as before.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.dispatch import fastpath
from torchneuron.dispatch.eager import _SHALLOW_COPY_TYPE, _call, _charge, _run_on_host
from torchneuron.dispatch.oprecord import OpRecord, record
from torchneuron.dispatch.support import dtype_reason, fallback_reason
from torchneuron.dispatch.tracking import _executed
from torchneuron.hardware import NeuronCore

__all__ = ["Facts", "facts_of", "rerun"]

_Tensor = torch.Tensor
_get_dispatch_mode = torch._C._get_dispatch_mode
_FAKE = torch._C._TorchDispatchModeKey.FAKE


class Facts:
    """What eager dispatch decided for one op with its argument metadata: its record, its
    signature key and the signature's facts (``fastpath.SignatureFacts``)."""

    __slots__ = ("rec", "key", "sig", "host")

    def __init__(self, rec: OpRecord, key: tuple | None, sig: fastpath.SignatureFacts | None
                 ) -> None:  # fmt: skip
        self.rec = rec
        self.key = key
        self.sig = sig
        # why eager runs it on the host (``SignatureFacts.fallback``), if it does: only
        # from ``facts_of(..., fallbacks=True)``
        self.host: str | None = None


def facts_of(func: Any, args: tuple, kwargs: dict, fallbacks: bool = False) -> Facts | None:
    """The facts eager dispatch finds for ``func`` on these neuron tensor arguments, if it
    would run it on the fast path as a device kernel (or a metadata-only op) with no host
    fallback; None otherwise (the op must go through ``run_op``). Call it before the op
    runs: the arguments' metadata is what eager keys it by. ``fallbacks``: also a device
    kernel that eager's fast path runs on the host for its signature (``linalg_vector_norm``,
    ``SignatureFacts.fallback``), which ``rerun`` then runs as eager does
    (``eager._run_on_host``)."""
    if func is _SHALLOW_COPY_TYPE:
        return None
    rec = record(func)
    if (rec.device_rule is not None or not rec.fast or rec.host_results
            or kwargs.get("device") is not None
            or (rec.is_view and torch.is_inference_mode_enabled())
            or _get_dispatch_mode(_FAKE) is not None):
        return None
    u = fastpath.unwrap(rec, args, kwargs, keyed=rec.kernel)
    if u is None or not u.tensors:
        return None
    if not rec.kernel:
        if rec.host_reason or dtype_reason(u.tensors) is not None:
            return None
        return Facts(rec, None, None)
    if u.key is None:
        return None
    sig = fastpath.facts_for(u.key)
    if sig is None:
        sig = fastpath.remember(u.key, fastpath.SignatureFacts(fallback_reason(rec.name,
                                                                               u.tensors)))
    facts = Facts(rec, u.key, sig)
    if sig.fallback is not None:
        if not fallbacks:
            return None
        facts.host = sig.fallback
    return facts


def rerun(facts: Facts, uargs: Any, ukwargs: dict, buffers: list[torch.Tensor],
          core: NeuronCore) -> Any:
    """Run the op of ``facts`` on buffers (``uargs``/``ukwargs``: its arguments with each
    neuron tensor replaced by its buffer, ``buffers`` those buffers in order) on ``core``
    (``get_core`` of its device), charged as eager dispatch charges it; returns the CPU
    result(s), with autograd's known-zero results made real zeros as eager's wrappers
    make them (a host fallback's results as they are: eager's wrapper does that)."""
    rec = facts.rec
    if facts.host is not None:  # (``facts_of(..., fallbacks=True)``)
        return _run_on_host(core, rec, facts.host, uargs, ukwargs, buffers, core.index)
    out = rec.op(*uargs, **ukwargs) if rec.plain else _call(rec, uargs, ukwargs, core.index)
    _executed[rec.name] += 1  # ``count_executed``, inline
    if not rec.kernel:  # metadata only: the charge is the dispatch
        core.run_eager_kernel(rec.name, (), None)
        return out
    sig = facts.sig
    if type(out) is _Tensor:
        hit = sig.results.get((out.shape, out.stride(), out.dtype))  # type: ignore[union-attr]
        if hit is not None and hit[2] is core.profile:
            core.run_eager_kernel(rec.name, hit[3], hit[0], hit[1], hit[4])
        else:
            _charge(core, rec, facts.key, sig, uargs, ukwargs, buffers, out)  # type: ignore[arg-type]
        return out if not out._is_zerotensor() else _real(out)
    _charge(core, rec, facts.key, sig, uargs, ukwargs, buffers, out)  # type: ignore[arg-type]
    if type(out) is tuple or type(out) is list:
        return type(out)(_real(o) if type(o) is _Tensor else o for o in out)
    return out


def _real(o: torch.Tensor) -> torch.Tensor:
    """``o``, or real zeros of its metadata if it is a known-zero tensor (``_wrap_one``)."""
    if o._is_zerotensor():
        return torch.empty_strided(o.shape, o.stride(), dtype=o.dtype).zero_()
    return o
