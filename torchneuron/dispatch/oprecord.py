"""Everything eager dispatch asks about an op overload, in one record found by ``id``.

Why: ``OpOverload.__hash__`` is a Python method, so every dict or set lookup keyed by
the overload (its facts, whether it is a fused RNN cell, a cross-device op, which
results stay on the host) costs a Python call; an eager op made half a dozen of them.
``record(func)`` finds all the answers with one lookup keyed by ``id(func)`` (the
record keeps ``func`` alive, so the id cannot be reused), and the record itself hashes
by identity, so it can stand for the op in the per-signature cache keys.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.dispatch import host_args
from torchneuron.dispatch.opfacts import OpFacts, op_facts
from torchneuron.dispatch.rnn import FUSED_CELL_KERNELS
from torchneuron.dispatch.support import host_op_reason
from torchneuron.hardware.eager_work import launches_kernel

__all__ = ["OpRecord", "record", "CROSS_DEVICE_OPS"]

aten = torch.ops.aten

# Ops that may legitimately see tensors of two devices.
CROSS_DEVICE_OPS = {
    aten.copy_.default,
    aten._to_copy.default,
    aten._copy_from.default,
    aten._copy_from_and_resize.default,
    aten.index.Tensor,
    aten._index_put_impl_.default,
    aten.index_put_.default,
    aten.index_put.default,
}


class OpRecord:
    """One overload's dispatch facts (see the module docstring); never mutated."""

    __slots__ = ("func", "facts", "name", "written", "fused", "host_results", "cross_device",
                 "is_copy", "plain", "keeps_metadata", "op", "fast", "kernel", "host_reason",
                 "is_view", "composite", "device_rule", "reads")  # fmt: skip

    def __init__(self, func: Any) -> None:
        self.func = func
        self.facts: OpFacts = op_facts(func)
        self.name = self.facts.name
        self.written = self.facts.written
        self.fused = FUSED_CELL_KERNELS.get(func) or _nested_refusal(self.name)
        self.is_view = bool(getattr(func, "is_view", False))
        # a CompositeImplicitAutograd kernel and no view tracking of its own (reshape,
        # flatten, mT, to, contiguous; not narrow): it reaches the device undecomposed
        # only when the autograd keys are excluded, and then nothing records its views
        self.composite = isinstance(func, torch._ops.OpOverload) and _has_kernel(
            func, "CompositeImplicitAutograd") and not _has_kernel(func, "ADInplaceOrView")
        self.host_results = host_args.host_results(func)
        self.cross_device = func in CROSS_DEVICE_OPS
        self.is_copy = func is aten.copy_.default
        # writes only ``self`` and cannot change its sizes, strides or storage (add_,
        # mul_, copy_, ...: not t_/squeeze_/as_strided_ (tagged inplace_view), not
        # resize_/_resize_output_/set_, not ``out=``): no metadata to follow afterwards
        self.keeps_metadata = (
            self.written == ((0, "self"),)
            and torch.Tag.inplace_view not in getattr(func, "tags", ())
            and "resize" not in self.name and not self.name.startswith("set")
        )  # fmt: skip
        # the kernel is just ``func(*args, **kwargs)`` and its results are all wrapped
        self.plain = (
            self.fused is None and not self.facts.random and not self.host_results
            and not self.facts.returns_host_values and not self.is_copy
        )  # fmt: skip
        # what calling ``func`` calls (``OpOverload.__call__`` is a Python frame around it)
        self.op = func._op if type(func) is torch._ops.OpOverload else func
        # dispatch may take the one-pass path (``eager._run_unwrapped``): no host copy or
        # read-back, no written argument whose metadata must follow the buffer's
        self.fast = (
            not self.is_copy and not self.facts.returns_host_values
            and (not self.written or self.keeps_metadata)
        )  # fmt: skip
        # False: metadata only (views, ...): no kernel, so no work or cost to look up
        self.kernel = launches_kernel(func)
        # why it runs on the host whatever its arguments (None: unless their dtypes say so)
        self.host_reason = host_op_reason(self.name)
        # a custom op's own rule for neuron tensors (``register_torch_dispatch``, e.g. an
        # ``nki_op``): what the dispatcher would call, so callers of ``run_op`` call it too
        self.device_rule = _device_rule(func)
        # hands values to the host whatever its arguments (a read: adaptive eager's
        # region boundary)
        self.reads = self.facts.returns_host_values or not self.facts.returns_tensors_only


def _device_rule(func: Any) -> Any:
    """The torch-dispatch rule a custom op registered for ``NeuronTensor``, or None."""
    if type(func) is not torch._ops.OpOverload or func.namespace in ("aten", "prims"):
        return None
    from torch._library.simple_registry import singleton

    from torchneuron.device.tensor import NeuronTensor

    # the registry itself: the device answers ``find_torch_dispatch_rule`` with its own
    # handler for every op (``_registration``), which is this module's caller
    return singleton.find(func.__qualname__).torch_dispatch_rules.find(NeuronTensor)


def _has_kernel(func: Any, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), key)


_records: dict[int, OpRecord] = {}


def record(func: Any) -> OpRecord:
    """The record of overload ``func`` (built on first use)."""
    rec = _records.get(id(func))
    if rec is None or rec.func is not func:
        rec = _records[id(func)] = OpRecord(func)
    return rec


def _nested_refusal(name: str) -> Any:
    """For an op that makes a nested tensor: a kernel that raises what to do instead.

    A neuron tensor is a wrapper of one strided buffer and cannot hold a nested one;
    the CPU kernel's nested result failed later with PyTorch's "Internal error:
    NestedTensorImpl doesn't support sizes". The usual way in is
    ``nn.TransformerEncoder``'s inference fast path (eval, no grad, a
    ``src_key_padding_mask``), which packs the batch with ``_nested_tensor_from_mask``.
    """
    if not name.startswith("_nested_") or name.startswith("_nested_tensor_from_mask_left"):
        return None

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"aten.{name} makes a nested tensor, which the neuron device does not support. "
            "nn.TransformerEncoder does this in eval mode under no_grad with a "
            "src_key_padding_mask; build it with enable_nested_tensor=False (or run with "
            "torch.backends.mha.set_fastpath_enabled(False)) to take the dense path.")

    return refuse
