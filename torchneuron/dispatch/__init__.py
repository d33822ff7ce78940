"""Eager op dispatch for the neuron device.

Owns: running one aten op on the simulated NeuronCore (unwrap -> CPU kernel on the
buffers -> wrap with ``device.tensor.wrap_buffer``, with the cost charged to the device
timeline), the host CPU fallback for ops the device cannot run, and op tracking (its
section of ``torchneuron.reset()`` / ``stats()``). Imports ``torchneuron.device`` and
``torchneuron.hardware`` only.
"""

from typing import Any

from torchneuron.device.tensor import set_op_handler
from torchneuron.dispatch import (
    autocast,
    control_flow,
    factory,
    fastpath,
    host_args,
    kernel_over_composite,
    lstm,
    recurrent,
    value_checks,
)
from torchneuron.dispatch.eager import run_op
from torchneuron.dispatch.tracking import (
    executed_ops,
    fallback_ops,
    fallback_reasons,
    reset_op_tracking,
)
from torchneuron.hardware import state

__all__ = [
    "run_op",
    "executed_ops",
    "fallback_ops",
    "fallback_reasons",
    "reset_op_tracking",
    "install",
]


def _reset() -> None:
    """The dispatch layer's part of ``torchneuron.reset()``: op counts and the fast
    path's signature cache (a memo: dropping it changes no charge, only host time)."""
    reset_op_tracking()
    fastpath.clear_cache()


def _stats() -> dict[str, Any]:
    return {"executed_ops": executed_ops(), "fallback_ops": fallback_ops(),
            "fallback_reasons": fallback_reasons()}


state.register("dispatch", reset=_reset, stats=_stats)


def _handle(func, types, args, kwargs):  # noqa: ANN001, ANN202
    return run_op(func, args, kwargs)


def install() -> None:
    """Make this module the executor of neuron ops (idempotent)."""
    set_op_handler(_handle)
    factory.install()
    host_args.install()
    autocast.install()
    kernel_over_composite.install()
    control_flow.install()
    value_checks.install()
    recurrent.install()
    lstm.install()
