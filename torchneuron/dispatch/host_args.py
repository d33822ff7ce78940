"""Tensor arguments and results that PyTorch keeps on the host, whatever the op's device.

Why: some APIs take lengths as CPU tensors on every device and hand back bookkeeping
tensors on the CPU: ``pack_padded_sequence`` requires CPU ``lengths`` and returns a
``PackedSequence`` whose ``batch_sizes`` is a CPU tensor; ``ctc_loss`` takes its
length tensors on the CPU or on the device. For CUDA these are part of the API, not
mixed-device mistakes, so the mixed-device check must let exactly these arguments
through, and the results PyTorch keeps on the host must stay there.

``ctc_loss`` needs one more step: for tensor subclasses PyTorch's composite
``ctc_loss.Tensor`` divides the device loss by the (CPU) target lengths, a mixed-device
op; for CUDA tensors it first turns the lengths into integer lists. The neuron device
registers that plain-tensor route for itself (``install``).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["host_tensor_ids", "host_results", "install"]

aten = torch.ops.aten
_lib: torch.library.Library | None = None

# op overload -> names of tensor arguments that may be CPU tensors
_HOST_ARGUMENTS: dict[Any, tuple[str, ...]] = {
    aten._pack_padded_sequence.default: ("lengths",),
    aten._ctc_loss.Tensor: ("input_lengths", "target_lengths"),
    aten._ctc_loss_backward.Tensor: ("input_lengths", "target_lengths"),
    # a PackedSequence's batch_sizes, as the RNNs take it (reached here in inference_mode,
    # where no autograd kernel of dispatch/lstm or dispatch/recurrent runs first)
    **{getattr(aten, rnn).data: ("batch_sizes",) for rnn in ("lstm", "gru", "rnn_tanh", "rnn_relu")},
    aten._pad_packed_sequence.default: ("batch_sizes",),
}

# op overload -> positions of results PyTorch returns on the host
_HOST_RESULTS: dict[Any, frozenset[int]] = {
    aten._pack_padded_sequence.default: frozenset({1}),  # batch_sizes
}


# Indexing: a device tensor may be indexed with CPU indices, but a CPU tensor may not
# be indexed with device indices (the result would silently land on the device).
_INDEX_OPS = frozenset({
    aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
    aten._index_put_impl_.default,
})  # fmt: skip


def _check_index_devices(func: Any, args: tuple) -> None:
    self, indices = args[0], args[1]
    if self.device.type == "neuron":
        return
    for index in indices:
        if isinstance(index, torch.Tensor) and index.device.type == "neuron":
            raise IndexError(
                "indices should be either on cpu or on the same device as the indexed "
                f"tensor ({self.device})"
            )
    values = args[2] if len(args) > 2 else None
    if isinstance(values, torch.Tensor) and values.device.type == "neuron" and values.dim():
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{values.device} and {self.device}! (when running {func}; move the values "
            f"with .to('{self.device}') first)"
        )


def host_tensor_ids(func: Any, args: tuple, kwargs: dict) -> set[int]:
    """``id()`` of the CPU tensors ``func`` may take in these arguments.

    Raises ``IndexError`` for a CPU tensor indexed with neuron indices, as CUDA does.
    """
    if func in _INDEX_OPS:
        _check_index_devices(func, args)
    names = _HOST_ARGUMENTS.get(func)
    if not names:
        return set()
    ids = set()
    for i, arg in enumerate(func._schema.arguments):
        if arg.name in names:
            v = args[i] if i < len(args) else kwargs.get(arg.name)
            if isinstance(v, torch.Tensor) and v.device.type == "cpu":
                ids.add(id(v))
    return ids


def host_results(func: Any) -> frozenset[int]:
    """Positions of ``func``'s results that stay on the host."""
    return _HOST_RESULTS.get(func, frozenset())


def _ctc_loss_with_length_lists(
    log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
    target_lengths: torch.Tensor, blank: int = 0, reduction: int = 1,
    zero_infinity: bool = False,
) -> torch.Tensor:  # fmt: skip
    """``ctc_loss.Tensor`` as PyTorch computes it for CUDA tensors: lengths as lists."""
    for name, t in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise RuntimeError(f"{name} must be integral")
    return aten.ctc_loss.IntList(
        log_probs, targets, input_lengths.tolist(), target_lengths.tolist(),
        blank, reduction, zero_infinity,
    )  # fmt: skip


def install() -> None:
    """Register the neuron device's ``ctc_loss.Tensor`` (idempotent)."""
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
        _lib.impl("ctc_loss.Tensor", _ctc_loss_with_length_lists, "AutogradPrivateUse1")
