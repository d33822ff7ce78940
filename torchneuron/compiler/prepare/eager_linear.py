"""``F.linear`` traced as eager's ATen kernel picks its ops, not as functorch's older copy.

Why: prepare traces under ``torch.func.functionalize``, and functorch registers a
``linear`` of its own for its dynamic-layer key (``PyTorchOperatorHacks.cpp``): it fuses
the bias into ``addmm`` only for a 2-d input and a contiguous 3-d one, and otherwise
traces ``matmul`` and then ``add``. Eager's ``linear`` (ATen ``Linear.cpp``) hands the bias
to ``addmm`` for any contiguous input whose bias is one row (``bias.squeeze()`` 1-d and
contiguous), the input flattened to rows. The bias added after the product is one
rounding more: the exact lowering sweep found float16 ``F.linear`` of a 1-d input off
by an ulp, and a float32 linear of a (2, 2, 3, 512) input compiled with
``compile_graph`` was off in 339 of 768 elements (float16 202, bfloat16 215).
(torch.compile and adaptive eager are unaffected: AOTAutograd's functionalization and
the device's recorded ops reach ATen's own ``linear``.)

``EagerLinear``, a TorchFunctionMode entered around the function prepare traces, answers
``F.linear`` with ATen's choice of ops (below), so the trace holds ``addmm`` where eager
calls it and ``decomp.fused_bias`` marks its bias for eager's kernel. Imports torch only.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["EagerLinear", "eager_linear"]


def _bias_fusable(bias: torch.Tensor | None) -> bool:
    """ATen's ``is_bias_likely_fusable``: one row of bias, contiguous."""
    return bias is not None and (bias.dim() == 1 or bias.squeeze().dim() == 1) \
        and bias.is_contiguous()


def eager_linear(input: torch.Tensor, weight: torch.Tensor,
                 bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` as ATen's CPU ``linear`` spells it (torch 2.13): ``addmm`` of a 2-d
    input with a bias; ``addmm`` of the input flattened to rows when the input is
    contiguous and the bias one contiguous row (``_flatten_nd_linear``); else ``matmul``
    and an ``add`` of the bias."""
    if input.dim() == 2 and bias is not None:
        return torch.addmm(bias, input, weight.t())
    if _bias_fusable(bias) and input.is_contiguous():
        rows = math.prod(input.shape[:-1])
        out = torch.addmm(bias, input.reshape(rows, input.shape[-1]), weight.t())
        return out.view(*input.shape[:-1], out.shape[1])
    out = torch.matmul(input, weight.t())
    return out if bias is None else torch.add(out, bias)


class EagerLinear(TorchFunctionMode):
    """While inside: ``F.linear`` of tensors of one or more dims is ``eager_linear``
    (anything else, eager's own call, with its error)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.linear:
            params = _params(*args, **kwargs)
            if params is not None:
                return eager_linear(*params)
        return func(*args, **kwargs)


def _params(input: Any, weight: Any, bias: Any = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
    """The call's tensors when ``eager_linear`` applies (plain dense tensors of one or
    more dims, a bias or None), else None."""
    tensors = [t for t in (input, weight, bias) if t is not None]
    if not all(isinstance(t, torch.Tensor) and t.layout == torch.strided for t in tensors):
        return None
    if input.dim() < 1 or weight.dim() < 1:
        return None
    return input, weight, bias
