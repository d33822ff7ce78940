"""Host data entering the device under the mode: copies that stay inside regions, and
``torch.tensor(data, device="neuron")``.

A host-to-device copy (``x.to("neuron")`` of a CPU tensor, which is ``_to_copy``, or
``t.copy_(cpu_tensor)``) runs eagerly at the moment it is issued, recording or replaying:
its result is a real buffer, a value from outside the region (an input slot), so a step
that builds its targets or masks from host data each step stays one region. A copy into a
tensor the current segment or replay already used would change what the region reads
(the graph reads its inputs once, at the region's end): that ends the segment, or
side-exits the replay first (``destination_used``).

PyTorch 2.13 fails an internal assert (``func != nullptr``, python_dispatch.cpp) when
``torch.tensor``, ``torch.as_tensor`` or ``torch.asarray`` build a tensor on a Python
PrivateUse1 device while any TorchDispatchMode is active. While adaptive eager is enabled
these three are wrapped: the tensor is built on the CPU, then copied to the device (the
same values, copied at the moment of the call, as a host-to-device copy is). Everything
else passes through to PyTorch unchanged.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch

from torchneuron.adaptive_eager.recorder import known_vid
from torchneuron.device.tensor import NeuronTensor

__all__ = ["install", "uninstall", "is_host_to_device", "destination_used"]

aten = torch.ops.aten


def is_host_to_device(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether the op copies a host (CPU) tensor to the device."""
    if func is aten._to_copy.default:
        src = args[0] if args else kwargs.get("self")
        return (isinstance(src, torch.Tensor) and not isinstance(src, NeuronTensor)
                and _is_neuron(kwargs.get("device")))
    if func is aten.copy_.default and len(args) >= 2:
        return (isinstance(args[0], NeuronTensor) and isinstance(args[1], torch.Tensor)
                and not isinstance(args[1], NeuronTensor))
    return False


def destination_used(dst: NeuronTensor, replay: Any, segment: Any) -> bool:
    """Whether a ``copy_`` destination is (a view of) something the replay in progress
    (else the segment being recorded) already used: a value or deferred write of the
    replay, an input slot (by wrapper id or storage), or a tensor of the segment."""
    vid = known_vid(dst)
    if replay is not None:
        if getattr(dst._pending, "replay", None) is replay:
            return True
        if vid in replay.slots:
            return True
        if dst._buffer is None:
            return False  # a value of an ended replay: it materializes on the copy
        ptr = dst._buffer.untyped_storage().data_ptr()
        return any(t._buffer.untyped_storage().data_ptr() == ptr for t in replay.ext)
    if vid is None:
        return False  # never seen by an op: not in the segment
    return vid in segment.src or any(vid in e.vids for e in segment.entries)

_NAMES = ("tensor", "as_tensor", "asarray")
_originals: dict[str, Callable[..., Any]] = {}


def _is_neuron(device: Any) -> bool:
    if device is None:
        return False
    try:
        return torch.device(device).type == "neuron"
    except (RuntimeError, TypeError):
        return False


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def build(data: Any, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        if not _is_neuron(device) or isinstance(data, torch.Tensor):
            return original(data, *args, **kwargs)
        requires_grad = bool(kwargs.pop("requires_grad", False))
        kwargs.pop("pin_memory", None)
        kwargs["device"] = "cpu"
        t = original(data, *args, **kwargs).to(device)
        return t.requires_grad_() if requires_grad else t

    build.__torchneuron_original__ = original  # type: ignore[attr-defined]
    return build


def install() -> None:
    for name in _NAMES:
        if name not in _originals:
            _originals[name] = getattr(torch, name)
            setattr(torch, name, _wrap(_originals[name]))
    _forget_dynamos_torch_functions()


def uninstall() -> None:
    for name, original in list(_originals.items()):
        setattr(torch, name, original)
        del _originals[name]
    _forget_dynamos_torch_functions()


def _forget_dynamos_torch_functions() -> None:
    """Dynamo maps the functions in ``torch``'s namespace to its rules once, by object: a
    map built while ``torch.tensor`` was our wrapper has no rule for the original, so after
    ``disable()`` ``torch.compile(fullgraph=True)`` of ``torch.tensor([...])`` failed.
    Rebuilt lazily on Dynamo's next trace."""
    trace_rules = sys.modules.get("torch._dynamo.trace_rules")
    if trace_rules is not None:
        trace_rules.get_torch_obj_rule_map.cache_clear()
