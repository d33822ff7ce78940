"""Ops with a CPU kernel *and* a composite fallback: the device runs the CPU kernel.

Why: ``silu_backward`` and ``mish_backward`` have structured kernels for CPU, CUDA and
MPS and a ``CompositeImplicitAutograd`` formula for every other backend. For
PrivateUse1 the dispatcher picks the formula (sigmoid, ``1 - s``, products), which
rounds differently from the fused CPU kernel: every gradient through ``F.silu``
(SwiGLU MLPs) and ``F.mish`` differed from CPU's in the last bits. A kernel registered
for the op on ``PrivateUse1`` outranks the composite (autograd then comes from the op's
own derivative formula), so the op reaches the device's handler, which runs the CPU
kernel on the buffers. ``tests/dispatch/test_kernel_over_composite.py`` checks that this
list names every aten op with both kinds of kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.device import tensor as _tensor

__all__ = ["OPS", "install"]

OPS = ("silu_backward", "mish_backward")
_lib: torch.library.Library | None = None


def _kernel(op: Any) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        handler = _tensor._op_handler
        assert handler is not None, "import torchneuron to register the neuron device"
        return handler(op, (), args, kwargs)

    return kernel


def install() -> None:
    """Register the PrivateUse1 kernels (idempotent)."""
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
        for name in OPS:
            _lib.impl(name, _kernel(getattr(torch.ops.aten, name).default), "PrivateUse1")
