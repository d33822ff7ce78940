"""Eager op dispatch: unwrap -> run on the simulated NeuronCore -> wrap.

Every aten op on neuron tensors arrives here (through ``NeuronTensor.__torch_dispatch__``,
or through the PrivateUse1 fallback for factory functions such as
``torch.zeros(..., device="neuron")``). The numbers come from the CPU kernel run on
the buffers; the time comes from the hardware layer's cost model. Outputs that are
inputs (in-place and ``out=`` ops) come back as the very same wrapper objects, and
views wrap views of the input buffers, so aliasing is exactly PyTorch's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._mode_utils import no_dispatch
from torch.utils._pytree import tree_flatten, tree_unflatten

from torchneuron.device import buffers, random
from torchneuron.device.tensor import NeuronTensor, wrap_buffer
from torchneuron.dispatch import fastpath, host_args, tracking
from torchneuron.dispatch.opfacts import eager_signature
from torchneuron.dispatch.oprecord import OpRecord, record
from torchneuron.dispatch.support import dtype_reason, fallback_reason
from torchneuron.dispatch.tracking import count_executed as _count_executed
from torchneuron.hardware import KernelWork, aten_kernel_work, get_core

__all__ = ["run_op", "unwrap_device"]

aten = torch.ops.aten
_get_dispatch_mode = torch._C._get_dispatch_mode
_FAKE = torch._C._TorchDispatchModeKey.FAKE
_inference_mode_enabled = torch.is_inference_mode_enabled
# A composite that answers from the wrappers' own dispatch keys, not from values. It
# reaches the device only under ``torch.inference_mode`` (autograd keys excluded), where
# running it on the buffers compared two CPU tensors: ``Module.to("neuron")`` asks
# ``_has_compatible_shallow_copy_type(cpu_param, neuron_param)`` and failed with a
# mixed-device error, although the answer (False: swap the parameter) needs no device.
_SHALLOW_COPY_TYPE = aten._has_compatible_shallow_copy_type.default
_AD_INPLACE_OR_VIEW = torch._C.DispatchKey.ADInplaceOrView


def _sync_metadata(wrapper: NeuronTensor, index: int, storage_ptr: int | None) -> None:
    """Give ``wrapper`` its buffer's sizes, strides and offset after it was written to.

    Why: ``resize_``, ``set_``, ``as_strided_``, ``t_``, ``squeeze_`` and every
    ``out=`` op (which resizes its output) change the metadata of the tensor they
    write. The CPU kernel changes the buffer's;
    the wrapper must follow, or it would report stale sizes and read the wrong
    elements. The wrapper's metadata is rewritten with ``set_`` under the meta
    kernel, without dispatching (as ``return_and_correct_aliasing`` does).
    """
    b = wrapper.buffer
    same = (wrapper.shape, wrapper.stride(), wrapper.storage_offset()) == (
        b.shape, b.stride(), b.storage_offset()
    )
    if not same:
        with no_dispatch():
            meta_in_tls = torch._C._meta_in_tls_dispatch_include()
            torch._C._set_meta_in_tls_dispatch_include(True)
            try:
                aten.set_.source_Storage_storage_offset(
                    wrapper, wrapper.untyped_storage(), b.storage_offset(), b.shape, b.stride()
                )
            finally:
                torch._C._set_meta_in_tls_dispatch_include(meta_in_tls)
    if storage_ptr is not None and b.untyped_storage().data_ptr() != storage_ptr:
        buffers.track(wrapper, b, index)  # the storage has grown or been replaced


def _mutated_args(rec: OpRecord, args: tuple, kwargs: dict) -> list[NeuronTensor]:
    """The neuron tensors that the op's schema says it writes to."""
    out = []
    for i, name in rec.written:
        v = args[i] if i < len(args) else kwargs.get(name)
        if isinstance(v, NeuronTensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(t for t in v if isinstance(t, NeuronTensor))
    return out


def unwrap_device(dev: Any) -> Any:
    """Map a neuron device argument to the CPU device its buffers live on."""
    if dev is not None and torch.device(dev).type == "neuron":
        return torch.device("cpu")
    return dev


def _device_index(dev: Any) -> int:
    d = torch.device(dev)
    if d.index is not None:
        return d.index
    from torchneuron.device.module import current_device

    return current_device()


def _mixed_device_error(func: Any, a: str, b: str) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{a} and {b}! (when running {func}; move the tensors with .to('{a}') first)"
    )


def _traced_to_cpu(t: torch.Tensor) -> torch.Tensor:
    """Under tracing, a plain tensor *on* neuron (a factory op answered by the fake or
    functional mode inside a composite op), moved to where neuron buffers live.

    Traced as ``_to_copy(device=cpu)``; the compiler rewrites ``device=neuron``
    factories in its graphs to CPU, which makes that copy a no-op.
    """
    return aten._to_copy.default(t, device=torch.device("cpu"))


def _scan(rec: OpRecord, flat: list, host_ok: set[int]) -> int | None:
    """The device index of the op's neuron tensors; raises on mixed devices.

    ``host_ok``: ids of CPU tensors the op takes on the host by PyTorch's API.
    """
    index: int | None = None
    cpu_seen = False
    for a in flat:
        if isinstance(a, NeuronTensor):
            if index is None:
                index = a._device_index
            elif a._device_index != index:
                raise _mixed_device_error(
                    rec.func, f"neuron:{index}", f"neuron:{a._device_index}"
                )
        elif isinstance(a, torch.Tensor) and a.device.type == "neuron":
            index = a.device.index or 0 if index is None else index
        elif isinstance(a, torch.Tensor) and a.dim() != 0 and id(a) not in host_ok:
            cpu_seen = True
    if cpu_seen and index is not None and not rec.cross_device:
        raise _mixed_device_error(rec.func, f"neuron:{index}", "cpu")
    return index


def _tracing(tensors: list[torch.Tensor]) -> bool:
    """True when the op is being traced, not run: its buffers are fake or functional, or
    a fake mode is active, which answers every kernel we would call with fake tensors
    (``torch.tensor(data, device="neuron")`` under Dynamo builds a real host tensor and
    then ``lift_fresh``-es it into the trace)."""
    return (any(type(t) is not torch.Tensor for t in tensors)
            or _get_dispatch_mode(_FAKE) is not None)


def run_op(func: Any, args: tuple, kwargs: dict, index: int | None = None) -> Any:
    """Run aten op ``func`` eagerly on the simulated device and return wrapped results.

    What depends only on the overload and the tensors' metadata (fallback decision,
    kernel work and cost, compile signature) is looked up per signature in
    ``fastpath``'s bounded cache; what depends only on the overload, in its
    ``oprecord``. Common arguments are unwrapped and keyed in one pass
    (``fastpath.unwrap``); the rest take the general path.
    """
    if func is _SHALLOW_COPY_TYPE:
        return func.decompose(*args, **kwargs)
    rec = record(func)
    if rec.device_rule is not None:  # a custom op's own rule (``OpRecord.device_rule``)
        return rec.device_rule(NeuronTensor, func, (NeuronTensor,), args, kwargs)
    if rec.is_view and _inference_mode_enabled() and not args[0].is_inference():
        if rec.composite:
            # ``reshape``, ``mT``, ``to``, ``contiguous`` arrive whole here, since the
            # autograd keys (where CPU tensors decompose them) are excluded; run as one
            # op, the result was never a view (CPU: a view that requires grad when its
            # base does) or never an inference tensor (CPU: ``w.double()`` is one).
            # Decomposed as the CPU does, each inner op takes its own path.
            with _view_tracking():
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        # A view of a normal tensor is a normal tensor, in inference mode too: PyTorch
        # then shares the base's version counter with it, which an inference tensor (a
        # wrapper made in inference mode) does not have ("Cannot set version_counter
        # for inference tensor"). So the wrapper is made outside inference mode.
        with torch.inference_mode(False):
            return _run_op(rec, func, args, kwargs, index)
    return _run_op(rec, func, args, kwargs, index)


def _view_tracking() -> Any:
    """Dispatch with the ADInplaceOrView key back on, which PyTorch turns off while a
    ``__torch_dispatch__`` runs: the views a decomposition makes are then recorded as
    views of their base (``_base``, ``requires_grad``), as on the CPU."""
    exclude = torch._C._dispatch_tls_local_exclude_set().remove(_AD_INPLACE_OR_VIEW)
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude)


def _run_op(rec: OpRecord, func: Any, args: tuple, kwargs: dict, index: int | None) -> Any:
    if rec.fast and kwargs.get("device") is None:
        u = fastpath.unwrap(rec, args, kwargs, keyed=rec.kernel)
        if u is not None and _get_dispatch_mode(_FAKE) is None:
            if u.index is not None:
                index = u.index
            elif index is None:
                index = 0
            return _run_unwrapped(rec, u, index)
    return _run_general(rec, func, args, kwargs, index)


def _run_unwrapped(rec: OpRecord, u: fastpath.Unwrapped, index: int) -> Any:
    """The common case: arguments unwrapped and keyed, no tracing, no host copy, no
    metadata of an argument to follow (``OpRecord.fast``)."""
    core = get_core(index)
    if not rec.kernel:  # metadata only: the charge is the dispatch, whatever the shapes
        reason = rec.host_reason or dtype_reason(u.tensors)
        if reason is not None:
            out = _run_on_host(core, rec, reason, u.uargs, u.ukwargs, u.tensors, index)
        else:
            out = rec.op(*u.uargs, **u.ukwargs) if rec.plain else _call(rec, u.uargs, u.ukwargs, index)
            _count_executed(rec.name)
            core.run_eager_kernel(rec.name, (), None)
        return _wrap_outputs(out, u.same, index, host=rec.host_results)
    key = u.key
    sig = fastpath.facts_for(key) if key is not None else None
    if sig is None:
        sig = fastpath.SignatureFacts(fallback_reason(rec.name, u.tensors))
        if key is not None:
            fastpath.remember(key, sig)
    if sig.fallback is not None:
        out = _run_on_host(core, rec, sig.fallback, u.uargs, u.ukwargs, u.tensors, index)
        return _wrap_outputs(out, u.same, index, host=rec.host_results)
    out = rec.op(*u.uargs, **u.ukwargs) if rec.plain else _call(rec, u.uargs, u.ukwargs, index)
    _count_executed(rec.name)
    if type(out) is torch.Tensor:  # the common case, inline
        hit = None
        if key is not None:
            hit = sig.results.get((out.shape, out.stride(), out.dtype))  # its ``out_key``
        if hit is not None and hit[2] is core.profile:
            core.run_eager_kernel(rec.name, hit[3], hit[0], hit[1], hit[4])
        else:
            _charge(core, rec, key, sig, u.uargs, u.ukwargs, u.tensors, out)
        if not rec.host_results:
            original = u.same.get(id(out))
            if original is not None:
                return original
            if out._is_zerotensor():
                return _wrap_one(out, u.same, index, True)
            return wrap_buffer(out, index)
    else:
        _charge(core, rec, key, sig, u.uargs, u.ukwargs, u.tensors, out)
    return _wrap_outputs(out, u.same, index, host=rec.host_results)


def _charge(
    core: Any, rec: OpRecord, key: tuple | None, sig: fastpath.SignatureFacts,
    uargs: Any, ukwargs: Any, tensors: list[torch.Tensor], out: Any,
) -> None:  # fmt: skip
    """Charge the kernel that computed ``out``: its work and cost from the signature's
    facts when this result metadata was seen before, else computed (and kept)."""
    okey = fastpath.out_key(out) if key is not None else None
    hit = sig.results.get(okey) if okey is not None else None
    if hit is not None and hit[2] is core.profile:
        core.run_eager_kernel(rec.name, hit[3], hit[0], hit[1], hit[4])
        return
    # first time for this signature and result (or the profile changed)
    name = rec.name
    work = aten_kernel_work(rec.func, uargs, ukwargs, out)
    signature = eager_signature(name, tensors)
    cost = core.run_eager_kernel(name, signature, work)
    if okey is not None:
        seen = fastpath.SeenKey((name, signature))
        sig.results[okey] = (work, cost, core.profile, signature, seen)


def _run_general(rec: OpRecord, func: Any, args: tuple, kwargs: dict, index: int | None) -> Any:
    """Any op: device arguments, host tensors, nested arguments, tracing, host copies,
    arguments whose metadata the op changes."""
    fast = fastpath.flatten(args, kwargs)
    flat, spec = fast if fast is not None else tree_flatten((args, kwargs))
    found = _scan(rec, flat, host_args.host_tensor_ids(func, args, kwargs))
    if found is not None:
        index = found
    target = kwargs.get("device")
    to_host = target is not None and torch.device(target).type != "neuron"
    if rec.is_copy and not isinstance(args[0], NeuronTensor):
        to_host = True  # copying device values into a host tensor is a read
    if target is not None and not to_host:
        index = _device_index(target)
    if index is None:
        index = 0

    same: dict[int, Any] = {}
    uflat = []
    tensors: list[torch.Tensor] = []
    for a in flat:
        if isinstance(a, torch.Tensor):
            if isinstance(a, NeuronTensor):
                b = a.buffer
            elif a.device.type == "neuron":
                b = _traced_to_cpu(a)
            else:
                b = a
            same[id(b)] = a
            uflat.append(b)
            tensors.append(b)
        elif isinstance(a, torch.device) and a.type == "neuron":
            uflat.append(torch.device("cpu"))
        else:
            uflat.append(a)
    if fast is not None:
        uargs, ukwargs = fastpath.unflatten(uflat, spec)
    else:
        uargs, ukwargs = tree_unflatten(uflat, spec)
    if "device" in ukwargs:
        ukwargs["device"] = unwrap_device(ukwargs["device"])

    if _tracing(tensors):
        # Tracing (fake / functional tensors under torch.compile): metadata only,
        # nothing runs on the device and nothing is charged.
        out = (rec.fused or func)(*uargs, **ukwargs)
        for t in _mutated_args(rec, args, kwargs):
            _sync_metadata(t, index, None)
        if to_host:
            return out
        return _wrap_outputs(out, same, index, track=False, host=rec.host_results)

    written = (
        [(t, t.buffer.untyped_storage().data_ptr()) for t in _mutated_args(rec, args, kwargs)]
        if rec.written and not rec.keeps_metadata else ()
    )  # fmt: skip
    core = get_core(index)
    name = rec.name
    key = fastpath.signature_key(rec, uflat, spec) if fast is not None else None
    sig = fastpath.facts_for(key) if key is not None else None
    if sig is None:
        sig = fastpath.SignatureFacts(fallback_reason(name, tensors))
        if key is not None:
            fastpath.remember(key, sig)
    if sig.fallback is not None:
        out = _run_on_host(core, rec, sig.fallback, uargs, ukwargs, tensors, index)
    else:
        out = func(*uargs, **ukwargs) if rec.plain else _call(rec, uargs, ukwargs, index)
        tracking.count_executed(name)
        if to_host or rec.facts.returns_host_values:
            _read_back(core, name, tensors)
        else:
            _charge(core, rec, key, sig, uargs, ukwargs, tensors, out)

    if to_host:
        return out
    for t, ptr in written:
        _sync_metadata(t, index, ptr)
    return _wrap_outputs(out, same, index, host=rec.host_results)


def _call(rec: OpRecord, uargs: Any, ukwargs: Any, index: int) -> Any:
    """Run the CPU kernel; random ops draw from device ``index``'s generator."""
    if rec.fused is not None:
        return rec.fused(*uargs, **ukwargs)
    if rec.facts.random:
        random.check_generator(ukwargs.get("generator"), index)
        with random.rng_state_swapped(index):
            return rec.func(*uargs, **ukwargs)
    return rec.func(*uargs, **ukwargs)


def _wrap_outputs(
    out: Any, same: dict[int, Any], index: int, track: bool = True,
    host: frozenset[int] = frozenset(),
) -> Any:  # fmt: skip
    """Wrap the op's results; those at positions ``host`` stay CPU tensors."""
    tp = type(out)
    if not host:  # the common cases without pytree: one tensor, a flat tuple
        if tp is torch.Tensor:
            return _wrap_one(out, same, index, track)
        if (tp is tuple or tp is list) and not any(type(o) in (list, tuple, dict) for o in out):
            return tp(
                _wrap_one(o, same, index, track) if isinstance(o, torch.Tensor) else o
                for o in out
            )
    flat, spec = tree_flatten(out)
    wrapped = [
        o if i in host or not isinstance(o, torch.Tensor) else _wrap_one(o, same, index, track)
        for i, o in enumerate(flat)
    ]
    return tree_unflatten(wrapped, spec)


def _wrap_one(o: torch.Tensor, same: dict[int, Any], index: int, track: bool) -> Any:
    """The neuron tensor for result ``o``: the input it is, or a new wrapper."""
    original = same.get(id(o))
    if original is None:
        if o._is_zerotensor():
            # Autograd's known-zero gradients have no memory; the device
            # gives them real zeros (same metadata) so they can be held.
            o = torch.empty_strided(o.shape, o.stride(), dtype=o.dtype).zero_()
        original = wrap_buffer(o, index, accounted=track)
    return original


def _bytes(ts: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def _read_back(core: Any, name: str, tensors: list[torch.Tensor]) -> None:
    """A read of device values by the host: DMA out, then the host waits for the device."""
    core.notify_sync("read")
    work = KernelWork(hbm_read_bytes=_bytes(tensors))
    core.run_eager_kernel(name, eager_signature(name, tensors), work)
    core.synchronize()


def _run_on_host(
    core: Any, rec: OpRecord, reason: str, uargs: Any, ukwargs: Any,
    tensors: list[torch.Tensor], index: int,
) -> Any:
    """CPU fallback: copy inputs to the host, run the CPU kernel, copy outputs back."""
    tracking.count_fallback(rec.name, reason)
    core.run_eager_kernel("fallback_d2h", (), KernelWork(hbm_read_bytes=_bytes(tensors)))
    core.synchronize()
    out = _call(rec, uargs, ukwargs, index)
    core.host(core.profile.host_dispatch_ns, "fallback")
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    core.run_eager_kernel("fallback_h2d", (), KernelWork(hbm_write_bytes=_bytes(outs)))
    return out
