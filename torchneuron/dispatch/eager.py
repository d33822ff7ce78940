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
from torch.utils._pytree import tree_flatten, tree_unflatten

from torchneuron.device import buffers, random
from torchneuron.device.tensor import NeuronTensor
from torchneuron.dispatch import tracking
from torchneuron.dispatch.support import fallback_reason
from torchneuron.hardware import KernelWork, aten_kernel_work, get_core

__all__ = ["run_op", "wrap", "unwrap_device"]

aten = torch.ops.aten

# Ops that may legitimately see tensors of two devices.
_CROSS_DEVICE_OPS = {
    aten.copy_.default,
    aten._to_copy.default,
    aten._copy_from.default,
    aten._copy_from_and_resize.default,
    aten.index.Tensor,
    aten._index_put_impl_.default,
    aten.index_put_.default,
    aten.index_put.default,
}


def wrap(buffer: torch.Tensor, index: int) -> NeuronTensor:
    """A new neuron tensor over ``buffer``, accounted against device ``index``'s HBM."""
    t = NeuronTensor(buffer, index)
    buffers.track(t, buffer, index)
    return t


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


def _scan(func: Any, flat: list) -> int | None:
    """The device index of the op's neuron tensors; raises on mixed devices."""
    index: int | None = None
    cpu_seen = False
    for a in flat:
        if isinstance(a, NeuronTensor):
            if index is None:
                index = a._device_index
            elif a._device_index != index:
                raise _mixed_device_error(func, f"neuron:{index}", f"neuron:{a._device_index}")
        elif isinstance(a, torch.Tensor) and a.dim() != 0:
            cpu_seen = True
    if cpu_seen and index is not None and func not in _CROSS_DEVICE_OPS:
        raise _mixed_device_error(func, f"neuron:{index}", "cpu")
    return index


def _returns_host_values(func: Any) -> bool:
    """True when the op hands tensor-derived Python values back to the host (a read)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return False
    for r in schema.returns:
        kind = str(r.type)
        if kind in ("Scalar", "bool", "int", "float", "complex", "SymInt", "SymFloat"):
            return True
    return False


def _signature(name: str, tensors: list[torch.Tensor]) -> tuple:
    return (name, tuple((tuple(t.shape), str(t.dtype)) for t in tensors))


def run_op(func: Any, args: tuple, kwargs: dict, index: int | None = None) -> Any:
    """Run aten op ``func`` eagerly on the simulated device and return wrapped results."""
    flat, spec = tree_flatten((args, kwargs))
    found = _scan(func, flat)
    if found is not None:
        index = found
    target = kwargs.get("device")
    to_host = target is not None and torch.device(target).type != "neuron"
    if func is aten.copy_.default and not isinstance(args[0], NeuronTensor):
        to_host = True  # copying device values into a host tensor is a read
    if target is not None and not to_host:
        index = _device_index(target)
    if index is None:
        index = 0
    core = get_core(index)

    same: dict[int, Any] = {}
    uflat = []
    tensors: list[torch.Tensor] = []
    for a in flat:
        if isinstance(a, NeuronTensor):
            b = a.buffer
            same[id(b)] = a
            uflat.append(b)
            tensors.append(b)
        elif isinstance(a, torch.Tensor):
            same[id(a)] = a
            uflat.append(a)
            tensors.append(a)
        elif isinstance(a, torch.device) and a.type == "neuron":
            uflat.append(torch.device("cpu"))
        elif isinstance(a, torch.Generator):
            uflat.append(a)
        else:
            uflat.append(a)
    uargs, ukwargs = tree_unflatten(uflat, spec)
    if "device" in ukwargs:
        ukwargs["device"] = unwrap_device(ukwargs["device"])

    if any(type(t) is not torch.Tensor for t in tensors):
        # Tracing (fake / functional tensors under torch.compile): metadata only,
        # nothing runs on the device and nothing is charged.
        return _wrap_outputs(func(*uargs, **ukwargs), same, index, track=False)

    name = func.__name__.split(".")[0] if hasattr(func, "__name__") else str(func)
    reason = fallback_reason(name, tensors)
    if reason is not None:
        out = _run_on_host(core, func, name, reason, uargs, ukwargs, tensors, index)
    else:
        if _is_random(func):
            with random.rng_state_swapped(index):
                out = func(*uargs, **ukwargs)
        else:
            out = func(*uargs, **ukwargs)
        tracking.count_executed(name)
        if to_host or _returns_host_values(func):
            _read_back(core, name, tensors, out)
        else:
            work = aten_kernel_work(func, uargs, ukwargs, out)
            core.run_eager_kernel(name, _signature(name, tensors), work)

    if to_host:
        return out
    return _wrap_outputs(out, same, index)


def _is_random(func: Any) -> bool:
    tags = getattr(func, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags


def _wrap_outputs(out: Any, same: dict[int, Any], index: int, track: bool = True) -> Any:
    flat, spec = tree_flatten(out)
    wrapped = []
    for o in flat:
        if isinstance(o, torch.Tensor):
            original = same.get(id(o))
            if original is None:
                original = wrap(o, index) if track else NeuronTensor(o, index)
            wrapped.append(original)
        else:
            wrapped.append(o)
    return tree_unflatten(wrapped, spec)


def _bytes(ts: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def _read_back(core: Any, name: str, tensors: list[torch.Tensor], out: Any) -> None:
    """A read of device values by the host: DMA out, then the host waits for the device."""
    nbytes = _bytes([t for t in tensors if t.device.type == "cpu"])
    core.run_eager_kernel(name, _signature(name, tensors), KernelWork(hbm_read_bytes=nbytes))
    core.synchronize()


def _run_on_host(
    core: Any, func: Any, name: str, reason: str, uargs: Any, ukwargs: Any,
    tensors: list[torch.Tensor], index: int,
) -> Any:
    """CPU fallback: copy inputs to the host, run the CPU kernel, copy outputs back."""
    tracking.count_fallback(name, reason)
    core.run_eager_kernel("fallback_d2h", (), KernelWork(hbm_read_bytes=_bytes(tensors)))
    core.synchronize()
    if _is_random(func):
        with random.rng_state_swapped(index):
            out = func(*uargs, **ukwargs)
    else:
        out = func(*uargs, **ukwargs)
    core.host(core.profile.host_dispatch_ns, "fallback")
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    core.run_eager_kernel("fallback_h2d", (), KernelWork(hbm_write_bytes=_bytes(outs)))
    return out
