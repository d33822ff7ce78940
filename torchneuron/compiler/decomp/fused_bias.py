"""A bias eager adds inside its kernel, marked so the interpreter calls that kernel.

Why: eager adds a convolution's bias and ``addmm``'s ``self`` (every ``nn.Linear`` with a
bias) inside the kernel: oneDNN starts or finishes its float32 accumulators with the
bias, MKL's ``gemm`` with ``beta = 1`` adds each block of the contraction onto the
output it was handed, which holds the bias. Torch-MLIR lowers both as the contraction
followed by an ``add``, one rounding more: at a contraction of 256 or more 30 to 60% of
a linear layer's float32 outputs differed from eager, and with them the loss and
every gradient of a training step (the bench zoo's residual MLP). Which kernel eager
picks depends on the CPU, the dtype and the shapes, so the interpreter runs the pair as
eager's own call (``interpreter/collapse/conv_bias`` and ``collapse/addmm_bias``), which
gives its bits on whichever CPU runs the program.

The pair is recognised only when the added tensor carries the mark put here:
``torchneuron::fused_bias(b)`` is the identity, carried to the program as
``stablehlo.custom_call @torchneuron.fused_bias`` (free for neuronc: the program's
ops and their cost are those of the unmarked lowering). A user's own ``x @ w + b``
lowers to the same ops without the mark and keeps eager's two roundings.

The marks are put by prepare's own trace, not AOTAutograd's (whose graph must keep
ops with autograd formulas): there an entry returns NotImplemented. Imports
``stablehlo.custom_targets`` and torch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._decomp.decompositions import addmm as torch_addmm

from torchneuron.compiler.decomp.registry import Lowering
from torchneuron.compiler.stablehlo.custom_targets import CustomCallTarget, register_target

__all__ = ["FUSED_BIAS_TARGET", "FUSED_BIAS_DECOMPOSITIONS", "mark_bias", "marking"]

aten = torch.ops.aten

FUSED_BIAS_TARGET = "torchneuron.fused_bias"
_LIB = torch.library.Library("torchneuron", "FRAGMENT")
_LIB.define("fused_bias(Tensor bias) -> Tensor")
_LIB.impl("fused_bias", lambda b: b.clone(), "CompositeExplicitAutograd")
torch.library.register_fake("torchneuron::fused_bias", lambda b: torch.empty_like(b), lib=_LIB)
marking = Lowering()  # set while an entry traces its marked call


def _identity(args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], int, list[Any]]:
    return [args[0].clone()], 0, []


register_target(CustomCallTarget(
    FUSED_BIAS_TARGET, _identity, plan=None, op=torch.ops.torchneuron.fused_bias.default,
    costed={"kind": "layout", "vector": 0, "scalar": 0}))


def mark_bias(bias: torch.Tensor) -> torch.Tensor:
    """``bias`` marked as added inside the kernel that reads it."""
    return torch.ops.torchneuron.fused_bias.default(bias)


def markable(bias: Any) -> bool:
    """Whether a call with this bias is traced marked: a float bias, outside an entry's
    own marked call (AOTAutograd's trace is left to the entries themselves)."""
    return isinstance(bias, torch.Tensor) and bias.is_floating_point() and not marking.active


def addmm(self: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, beta: Any = 1,
          alpha: Any = 1) -> Any:
    """``mm(mat1, mat2) + self`` with ``self`` marked (``beta`` and ``alpha`` of 1, one
    float dtype; other calls take PyTorch's decomposition, which scales in the op's
    math dtype)."""
    if torch._guards.TracingContext.try_get() is not None:
        return NotImplemented  # (AOTAutograd's trace keeps the op: prepare's decomposes it)
    if beta == 1 and alpha == 1 and markable(self) and self.dtype == mat1.dtype == mat2.dtype:
        return aten.add.Tensor(aten.mm.default(mat1, mat2), mark_bias(self))
    return torch_addmm(self, mat1, mat2, beta, alpha)


FUSED_BIAS_DECOMPOSITIONS = {aten.addmm.default: addmm}
