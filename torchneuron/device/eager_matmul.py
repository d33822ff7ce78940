"""``matmul`` decomposed as ATen decomposes it for plain CPU tensors.

Why: ATen's ``matmul`` (a ``CompositeImplicitAutograd`` kernel, ``LinearAlgebra.cpp``)
multiplies a 3-D by a 3-D tensor whose batches differ, one of them 1, in one of two ways.
For a plain CPU tensor that does not require grad it broadcasts both into a ``bmm``; for
one that requires grad, *or is "tensor-subclass-like"*, it squeezes the batch of 1 away
and folds the other operand into one ``mm``. The two round differently (OpInfo's
``matmul`` sample of [5, 5, 5] by [1, 5, 5]: 22 of 25 rows differ in the last bits).
A neuron tensor is a Python subclass and a traced tensor (fake, functional) is
subclass-like too, so the device's eager and every compiled graph took the ``mm`` where
eager PyTorch on the CPU takes the ``bmm``. ``matmul`` here takes the ``bmm`` in exactly
that case and leaves every other to ATen's composite, which does not look at the
subclass there.

Registered for the device's autograd key (``register``: the kernel a neuron tensor's
``matmul`` runs before the composite) and, while the compiler traces, as the op's Python
kernel at ``CompositeImplicitAutograd`` (``compiler.decomp.autograd_kernels``). Imports
torch only.
"""

from __future__ import annotations

import torch
from torch._C import DispatchKey

__all__ = ["matmul", "register"]

aten = torch.ops.aten


def _takes_bmm(tensor1: torch.Tensor, tensor2: torch.Tensor) -> bool:
    """True where ATen, given plain tensors, broadcasts into a ``bmm`` but, given a
    subclass, would squeeze a batch of 1 into an ``mm``."""
    if tensor1.dim() != 3 or tensor2.dim() != 3 or tensor1.shape[0] == tensor2.shape[0]:
        return False
    squeezes = (tensor1.shape[0] == 1 and tensor1.requires_grad) or \
        (tensor2.shape[0] == 1 and tensor2.requires_grad)
    return (tensor1.shape[0] == 1 or tensor2.shape[0] == 1) and not squeezes


def matmul(tensor1: torch.Tensor, tensor2: torch.Tensor) -> torch.Tensor:
    """``aten.matmul``, with the ops (and so the roundings) eager CPU tensors get."""
    if not _takes_bmm(tensor1, tensor2):
        return aten.matmul.default._op_dk(DispatchKey.CompositeImplicitAutograd, tensor1,
                                          tensor2)
    batch = torch.broadcast_shapes(tensor1.shape[:1], tensor2.shape[:1])[0]
    (n, m), p = tensor1.shape[1:], tensor2.shape[2]
    left = tensor1.expand(batch, n, m).reshape(batch, n, m)
    right = tensor2.expand(batch, m, p).reshape(batch, m, p)
    return aten._unsafe_view(left.bmm(right), (batch, n, p))


def register(lib: torch.library.Library) -> None:
    """The device's ``matmul`` (its autograd key: differentiable through the ops above)."""
    lib.impl("matmul", matmul, "AutogradPrivateUse1")
