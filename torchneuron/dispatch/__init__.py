"""Eager op dispatch for the neuron device.

Owns: running one aten op on the simulated NeuronCore (unwrap -> CPU kernel on the
buffers -> wrap, with the cost charged to the device timeline), the host CPU
fallback for ops the device cannot run, and op tracking. Imports
``torchneuron.device`` and ``torchneuron.hardware`` only.
"""

import torch

from torchneuron.device.tensor import set_op_handler
from torchneuron.dispatch import autocast, factory, host_args, kernel_over_composite
from torchneuron.dispatch.eager import run_op, wrap
from torchneuron.dispatch.tracking import (
    executed_ops,
    fallback_ops,
    fallback_reasons,
    reset_op_tracking,
)

__all__ = [
    "run_op",
    "wrap",
    "executed_ops",
    "fallback_ops",
    "fallback_reasons",
    "reset_op_tracking",
    "install",
]


# Composite ops that answer from the wrappers' own dispatch keys, not from values. They
# reach the handler only under ``torch.inference_mode`` (autograd keys excluded), where
# running them on the buffers would compare two CPU tensors: ``Module.to("neuron")``
# asks ``_has_compatible_shallow_copy_type(cpu_param, neuron_param)`` and then failed
# with a mixed-device error, although the answer (False: swap the parameter) needs no
# device.
_ANSWERED_BY_COMPOSITE = frozenset({torch.ops.aten._has_compatible_shallow_copy_type.default})


def _handle(func, types, args, kwargs):  # noqa: ANN001, ANN202
    if func in _ANSWERED_BY_COMPOSITE:
        return func.decompose(*args, **kwargs)
    return run_op(func, args, kwargs)


def install() -> None:
    """Make this module the executor of neuron ops (idempotent)."""
    set_op_handler(_handle)
    factory.install()
    host_args.install()
    autocast.install()
    kernel_over_composite.install()
