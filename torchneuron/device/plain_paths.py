"""``matmul``, ``prod``'s gradient, singular values and eigenvalues, computed as ATen
computes them for CPU tensors.

Why: a few of ATen's composites and derivative formulas ask whether a tensor is
"tensor-subclass-like" (a Python subclass, a traced fake or functional tensor, or any
tensor while a dispatch mode is active) and then take another path, one that rounds
differently. A neuron tensor is a Python subclass and a traced tensor is subclass-like,
so the device's eager and every compiled graph took those paths where eager PyTorch on
the CPU does not (found by ``tools/opinfo_device.py --exact``, the device against the CPU
bit for bit, and the lowering sweep with all samples):

- ``matmul`` of a 3-D by a 3-D tensor whose batches differ, one of them 1: for a plain
  tensor that does not require grad ATen broadcasts both into a ``bmm``; for one that
  requires grad or is subclass-like it squeezes the batch of 1 away and folds the other
  operand into one ``mm`` (OpInfo's [5, 5, 5] by [1, 5, 5]: 22 of 25 rows off in the
  last bits). ``matmul`` here takes the ``bmm`` in exactly that case and leaves every
  other to ATen's composite, which does not look at the subclass there.
- ``prod``'s gradient: for a plain tensor without zeros ATen computes ``grad * (result /
  input)``, and its exclusive-cumprod formula only when the input holds a zero; for a
  subclass-like tensor always the cumprod formula (49 of 125 elements of OpInfo's sample
  off). ``prod`` here is an ``autograd.Function`` whose backward computes both and picks
  by whether the input holds a zero: traceable (no data-dependent shape), and eager's
  bits in the device's eager, in compiled graphs and in replayed regions.

- ``linalg_svdvals`` and ``linalg_eigvalsh`` (and ``cond``, the nuclear and 2-norms
  built on them): ATen asks LAPACK for the singular vectors (eigenvectors) too when a
  gradient may need them or the tensor is subclass-like, and LAPACK then rounds the
  values differently (4 of 5 singular values of OpInfo's first sample off). Here only
  when a gradient may need them.

``register`` puts them at the device's autograd key (a neuron tensor's ``matmul`` and
``prod`` run them before ATen's composite and formula); adaptive eager holds them for CPU
tensors while its dispatch mode is active (``hold_for_cpu_tensors``: ATen counts every
tensor as subclass-like then); the compiler's traces also take
``matmul`` as the op's Python kernel at ``CompositeImplicitAutograd``
(``compiler.decomp.autograd_kernels``), for CPU tensors traced with subclass-like fakes.
Imports torch only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._C import DispatchKey
from torch._subclasses.fake_tensor import is_fake

__all__ = ["eigvalsh", "hold_for_cpu_tensors", "matmul", "prod", "prod_dim", "register",
           "release_for_cpu_tensors", "svdvals"]

aten = torch.ops.aten


# -- matmul ----------------------------------------------------------------------------


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


# -- prod --------------------------------------------------------------------------------


def _exclusive_products(grad: torch.Tensor, x: torch.Tensor, dim: int) -> torch.Tensor:
    """ATen's zero-safe gradient of a product along ``dim``: ``grad`` times the product of
    the elements before each (a cumprod) and after it (a reversed cumprod)."""
    if x.numel() == 0:
        return grad.expand_as(x)
    if x.shape[dim] == 1:
        return grad
    ones = torch.ones([*x.shape[:dim], 1, *x.shape[dim + 1:]], dtype=grad.dtype,
                      device=grad.device)
    before = torch.cat([ones, x.narrow(dim, 0, x.shape[dim] - 1)], dim).cumprod(dim)
    after = torch.cat([ones, x.narrow(dim, 1, x.shape[dim] - 1).flip(dim)], dim)
    return grad * (before * after.cumprod(dim).flip(dim)).conj()


def _prod_gradient(grad: torch.Tensor, x: torch.Tensor, result: torch.Tensor,
                   dim: int | None) -> torch.Tensor:
    """ATen's ``prod_backward`` for a plain tensor: ``grad * (result / x)`` unless ``x``
    holds a zero (then the zero-safe formula, or for a whole-tensor product with two
    zeros, zeros). A traced ``x`` has no data to branch on: each is computed and one
    picked (the same bits, but a second derivative through each)."""
    x = x.to(grad.dtype)
    if x.dim() == 0:
        return grad

    def safe() -> torch.Tensor:
        if dim is None:
            return _exclusive_products(grad, x.contiguous().view(-1), 0).view_as(x)
        return _exclusive_products(grad, x, dim)

    def divided() -> torch.Tensor:
        return grad * (result / x).conj()

    def pick(cond: torch.Tensor, then: Callable[[], torch.Tensor],
             otherwise: Callable[[], torch.Tensor]) -> torch.Tensor:
        if is_fake(x):
            return torch.where(cond, then(), otherwise())
        return then() if cond else otherwise()

    zeros = (x == 0).sum()
    if dim is None:  # of a whole-tensor product, a second zero makes every gradient +0
        return pick(zeros > 1, lambda: torch.zeros_like(x),
                    lambda: pick(zeros == 1, safe, divided))
    return pick(zeros > 0, safe, divided)


class _Prod(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor, dim: int | None, keepdim: bool,
                dtype: torch.dtype | None) -> torch.Tensor:
        return aten.prod.default(x, dtype=dtype) if dim is None else \
            aten.prod.dim_int(x, dim, keepdim, dtype=dtype)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        x, ctx.dim, ctx.keepdim, _ = inputs
        ctx.save_for_backward(x, output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, result = ctx.saved_tensors
        dim = ctx.dim
        if dim is not None and x.dim() > 0:
            dim = dim % x.dim()
            if not ctx.keepdim:
                grad, result = grad.unsqueeze(dim), result.unsqueeze(dim)
        return _prod_gradient(grad, x, result, dim).to(x.dtype), None, None, None


def _ours(x: torch.Tensor) -> bool:
    """Whether ``prod`` of ``x`` records ``_Prod``: a float or complex tensor that
    requires grad, outside functorch's transforms (which take the subclass path on the
    CPU as well: ATen's own autograd kernel then, as for anything without a gradient)."""
    return torch.is_grad_enabled() and x.requires_grad and \
        (x.dtype.is_floating_point or x.dtype.is_complex) and \
        torch._C._functorch.peek_interpreter_stack() is None


def prod(x: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``aten.prod``, whose gradient is eager's for CPU tensors."""
    if not _ours(x):
        return aten.prod.default._op_dk(DispatchKey.Autograd, x, dtype=dtype)
    return _Prod.apply(x, None, False, dtype)


def prod_dim(x: torch.Tensor, dim: int, keepdim: bool = False, *,
             dtype: torch.dtype | None = None) -> torch.Tensor:
    """``aten.prod.dim_int``, whose gradient is eager's for CPU tensors."""
    if not _ours(x):
        return aten.prod.dim_int._op_dk(DispatchKey.Autograd, x, dim, keepdim, dtype=dtype)
    return _Prod.apply(x, dim, keepdim, dtype)


# -- svdvals, eigvalsh -----------------------------------------------------------------


def _may_need_vectors(a: torch.Tensor) -> bool:
    """ATen's ``_may_require_fw_or_bw_grad`` for a plain tensor (the subclass test left
    out), or true under functorch's transforms, which are subclass-like on the CPU too."""
    return (torch.is_grad_enabled() and a.requires_grad) or \
        torch.autograd.forward_ad.unpack_dual(a).tangent is not None or \
        torch._C._functorch.peek_interpreter_stack() is not None


def svdvals(a: torch.Tensor, *, driver: str | None = None) -> torch.Tensor:
    """``aten.linalg_svdvals``: singular values without the vectors unless a gradient
    may need them, as for a CPU tensor (LAPACK rounds them differently with vectors)."""
    return aten._linalg_svd.default(a, False, _may_need_vectors(a), driver=driver)[1]


def eigvalsh(a: torch.Tensor, UPLO: str = "L") -> torch.Tensor:  # noqa: N803 - ATen's name
    """``aten.linalg_eigvalsh``: eigenvalues without the vectors unless a gradient may
    need them, as for a CPU tensor."""
    return aten._linalg_eigh.default(a, UPLO, _may_need_vectors(a))[0]


_KERNELS = (("matmul", matmul), ("prod", prod), ("prod.dim_int", prod_dim),
            ("linalg_svdvals", svdvals), ("linalg_eigvalsh", eigvalsh))


def register(lib: torch.library.Library) -> None:
    """The device's ``matmul`` and ``prod`` (at its autograd key)."""
    for name, kernel in _KERNELS:
        lib.impl(name, kernel, "AutogradPrivateUse1")


_cpu_lib: torch.library.Library | None = None


def hold_for_cpu_tensors() -> None:
    """CPU tensors' ``matmul`` and ``prod`` take these paths too, until ``release``.

    Why: ATen counts *every* tensor as subclass-like while a dispatch mode is active, so a
    program's CPU computations changed their bits when adaptive eager (a dispatch mode)
    was enabled: a CPU ``matmul`` with a batch of one took the ``mm``, a CPU ``prod``'s
    gradient the cumprod formula. Held while adaptive eager's mode is (a Python kernel
    per CPU ``matmul`` and ``prod`` then; none otherwise)."""
    global _cpu_lib
    if _cpu_lib is None:
        _cpu_lib = torch.library.Library("aten", "IMPL")
        for name, kernel in _KERNELS:
            _cpu_lib.impl(name, kernel, "AutogradCPU")


def release_for_cpu_tensors() -> None:
    """Undo ``hold_for_cpu_tensors``: CPU tensors get ATen's own kernels again."""
    global _cpu_lib
    if _cpu_lib is not None:
        lib, _cpu_lib = _cpu_lib, None
        lib._destroy()
