"""Composite ops whose branch for PrivateUse1 skips checks the CPU makes.

Why: ``F.one_hot`` checks on the CPU that its input is int64 and its classes in range
("Class values must be non-negative.", "... smaller than num_classes."), but for
PrivateUse1 it skips them and computes ``t.unsqueeze(-1) == arange(num_classes)``, so an
out-of-range class on ``neuron`` gave a row of zeros silently (while torch.compile, with
its index checks, raised CPU's error). A kernel at the op's ``AutogradPrivateUse1`` key,
which runs before anything else, checks the values on the host, as the simulator's
other index checks do (no device work is charged), then runs the same composite, so
the device sees the ops it saw before. A buffer not computed yet (adaptive eager's
pending value) or a traced one is not read.

``F.scaled_dot_product_attention`` the same way: on the CPU its composite first asks the
CPU's backend choice (``_fused_sdp_choice``), which checks shapes, dtypes and strides
and raises (a 1-d ``attn_mask``: IndexError "Dimension out of range"); PrivateUse1 has no
choice, takes the math path, and broadcast such a mask into numbers. The kernel asks
the CPU's choice on empty CPU tensors of the inputs' layouts (no values are read, so it
runs under tracing too, where torch.compile then raises CPU's error from Dynamo as the
CPU does) and, if it does not raise, computes what the CPU's composite computes for
that choice: CPU's flash kernel (``_scaled_dot_product_flash_attention_for_cpu``) when
the CPU picks it (float inputs with no dropout), else the composite's math path. The
math path in place of CPU's flash kernel rounded differently (issue 22: a GPT block's
attention output, and every gradient after it, off in the last bits).
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.device.tensor import NeuronTensor

__all__ = ["install"]

_lib: torch.library.Library | None = None
_ONE_HOT = torch.ops.aten.one_hot.default
_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
_FLASH = int(torch.nn.attention.SDPBackend.FLASH_ATTENTION)  # _fused_sdp_choice's number


def _host_values(t: Any) -> torch.Tensor | None:
    if not isinstance(t, NeuronTensor) or t._pending is not None:
        return None
    b = t._buffer
    return b if type(b) is torch.Tensor and b.numel() else None


def _one_hot(self: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
    """CPU's checks, in CPU's order, then PyTorch's composite for the device."""
    if self.dtype != torch.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if self.numel() == 0 and num_classes <= 0:
        raise RuntimeError("Can not infer total number of classes from empty tensor.")
    values = _host_values(self)
    if values is not None:
        if int(values.min()) < 0:
            raise RuntimeError("Class values must be non-negative.")
        if num_classes != -1 and int(values.max()) >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    return _ONE_HOT.decompose(self, num_classes)


def _cpu_like(t: Any) -> Any:
    """An empty CPU tensor with ``t``'s sizes, strides and dtype (not its values)."""
    if not isinstance(t, torch.Tensor):
        return t
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")


def _static(t: Any) -> bool:
    return not isinstance(t, torch.Tensor) or not any(
        isinstance(d, torch.SymInt) for d in (*t.shape, *t.stride()))


def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
          attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
          is_causal: bool = False, *, scale: float | None = None,
          enable_gqa: bool = False) -> torch.Tensor:
    """CPU's backend choice (its checks) on layout-only CPU tensors, then the composite."""
    tensors = (query, key, value, attn_mask)
    choice = None
    if all(_static(t) for t in tensors):
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():  # real CPU tensors, seen by no mode or recorder
            q, k, v, m = (_cpu_like(t) for t in tensors)
            choice = torch._fused_sdp_choice(q, k, v, m, dropout_p, is_causal, scale=scale,
                                             enable_gqa=enable_gqa)
    if choice == _FLASH and query.dim() == 4:
        # CPU's flash kernel, as the CPU's composite calls it (a boolean mask as the
        # additive one it converts it to): math attention rounds differently (a GPT
        # block's attention output was off in the last bits, and every gradient after it)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.where(attn_mask.logical_not(), float("-inf"), torch.zeros(
                (), dtype=query.dtype, device=attn_mask.device))
        return _FLASH_CPU(query, key, value, dropout_p, is_causal, attn_mask=attn_mask,
                          scale=scale)[0]
    return _SDPA.decompose(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                           enable_gqa=enable_gqa)


def install() -> None:
    """Register the checking kernels (idempotent)."""
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
        _lib.impl("one_hot", _one_hot, "AutogradPrivateUse1")
        for key in ("AutogradPrivateUse1", "PrivateUse1"):  # PrivateUse1: inference_mode
            _lib.impl("scaled_dot_product_attention", _sdpa, key)
