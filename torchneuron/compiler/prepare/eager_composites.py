"""``F.linear`` and ``binary_cross_entropy_with_logits`` traced as eager's ATen computes them,
not as functorch's older copies (and ``F.linear_cross_entropy``, whose linear is one).

Why: prepare traces under ``torch.func.functionalize``, and functorch registers kernels of
its own for its dynamic-layer key (``PyTorchOperatorHacks.cpp``) for these two composites
(and for dropouts, whose draws ``prepare.random_ops`` lifts out, and two backward ops a
forward trace never meets):

- its ``linear`` fuses the bias into ``addmm`` only for a 2-d input and a contiguous 3-d
  one, and otherwise traces ``matmul`` and then ``add``. Eager's (ATen ``Linear.cpp``) hands
  the bias to ``addmm`` for any contiguous input whose bias is one contiguous row, the
  input flattened to rows. The bias added after the product is one rounding more: the
  exact lowering sweep found float16 ``F.linear`` of a 1-d input off by an ulp, and a
  float32 linear of a (2, 2, 3, 512) input was off in 339 of 768 elements;
- its ``binary_cross_entropy_with_logits`` is the older ``max(-x, 0)`` / ``exp`` / ``log``
  formula, eager's (``Loss.cpp``) ``(1 - y) * x - log_sigmoid(x)``: float16 with a weight
  was off in 11 of 25 elements, a MISMATCH of 0.0012 in the sweep.

(torch.compile and adaptive eager are unaffected: AOTAutograd's functionalization and the
device's recorded ops reach ATen's own kernels.) ``EagerComposites``, a TorchFunctionMode
entered around the function prepare traces, answers both calls with ATen's ops (below),
so the trace holds what eager computes: ``addmm`` where eager calls it (its bias marked
by ``decomp.fused_bias`` for eager's kernel), ``log_sigmoid`` and eager's in-place steps
(each rounded to its left operand's dtype, as an in-place op writes). Imports torch only.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["EagerComposites", "eager_linear", "eager_bce_with_logits", "eager_linear_cross_entropy"]


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


def eager_bce_with_logits(input: torch.Tensor, target: torch.Tensor,
                          weight: torch.Tensor | None = None,
                          pos_weight: torch.Tensor | None = None,
                          reduction: int = 1) -> torch.Tensor:
    """ATen's ``binary_cross_entropy_with_logits`` (torch 2.13): ``log_sigmoid(x)``, scaled
    by ``(pos_weight - 1) * y + 1``; ``(1 - y) * x - log_sigmoid``, scaled by ``weight``; then
    the reduction (0 none, 1 mean, 2 sum). ``a.mul_(b)`` is ``(a * b)`` in ``a``'s dtype."""
    log_sig = F.logsigmoid(input)
    if pos_weight is not None:
        log_weight = (pos_weight - 1).mul(target)
        log_weight = (log_weight + 1).to(log_weight.dtype)
        log_sig = (log_sig * log_weight).to(log_sig.dtype)
    loss = 1 - target
    loss = (loss * input).to(loss.dtype)
    loss = (loss - log_sig).to(loss.dtype)
    if weight is not None:
        loss = (loss * weight).to(loss.dtype)
    return loss.mean() if reduction == 1 else loss.sum() if reduction == 2 else loss


class EagerComposites(TorchFunctionMode):
    """While inside: ``F.linear`` is ``eager_linear`` and the logits' binary cross-entropy
    ``eager_bce_with_logits`` (on plain dense tensors; anything else, the call as made)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.linear:
            params = _params(*args, **kwargs)
            if params is not None:
                return eager_linear(*params)
        elif func is torch.binary_cross_entropy_with_logits and _dense(args, kwargs):
            return eager_bce_with_logits(*args, **kwargs)
        elif func is F.binary_cross_entropy_with_logits:  # (its op is called with this off)
            call = _bce_call(args, kwargs)
            if call is not None:
                return eager_bce_with_logits(*call)
        elif func is F.linear_cross_entropy:
            call = _linear_ce_call(args, kwargs)
            if call is not None:
                return eager_linear_cross_entropy(*call)
        return func(*args, **kwargs)


def eager_linear_cross_entropy(input: torch.Tensor, weight: torch.Tensor,
                               target: torch.Tensor, bias: torch.Tensor | None,
                               class_weight: torch.Tensor | None, reduction: str,
                               ignore_index: int, label_smoothing: float) -> torch.Tensor:
    """``F.linear_cross_entropy``'s reference path (a 2-d weight; no ``options``, or
    ``options`` the chunked op does not take: class probabilities, label smoothing):
    ``cross_entropy(linear(...))`` with the linear as ``eager_linear``. Why: this mode is
    off while a call it passes on runs, so the ``F.linear`` inside went to functorch's
    (a float16 1-d input's product and bias add rounded twice: the exact sweep's float16
    ``linear_cross_entropy`` was a MISMATCH, 20.906 for eager's 20.938)."""
    logits = eager_linear(input, weight, bias)
    logits = logits.reshape(*input.shape[:-1], weight.shape[0])
    return F.cross_entropy(logits, target, weight=class_weight, reduction=reduction,
                           ignore_index=ignore_index, label_smoothing=label_smoothing)


def _linear_ce_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """``eager_linear_cross_entropy``'s arguments where the function would take its
    reference path without raising (plain tensors, a 1-d or 2-d input, a 2-d weight of
    its width, a bias of one row); else None (the call as made)."""
    bound = inspect.signature(F.linear_cross_entropy).bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    x, w, t, b = a["input"], a["linear_weight"], a["target"], a["linear_bias"]
    tensors = [v for v in (x, w, t, b, a["weight"]) if v is not None]
    if not all(isinstance(v, torch.Tensor) and v.layout == torch.strided for v in tensors):
        return None
    if a["options"] is not None and a["reduction"] in ("mean", "sum", "none") \
            and a["label_smoothing"] == 0.0 and t.dtype == torch.int64:
        return None  # (the chunked op, a custom op of its own)
    if x.dim() not in (1, 2) or w.dim() != 2 or x.shape[-1] != w.shape[-1] \
            or (b is not None and tuple(b.shape) != (w.shape[0],)):
        return None
    ignore = a["ignore_index"]
    if ignore is not None and tuple(t.shape) == (*x.shape[:-1], w.shape[0]):
        return None  # (probabilities with an ignore_index: the function raises)
    return (x, w, t, b, a["weight"], a["reduction"], -100 if ignore is None else ignore,
            a["label_smoothing"])


def _bce_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """``F.binary_cross_entropy_with_logits``'s arguments as its op takes them (the
    reduction as its number), or None where the function would raise or not apply."""
    from torch.nn import _reduction

    bound = inspect.signature(F.binary_cross_entropy_with_logits).bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    if a["size_average"] is not None or a["reduce"] is not None:
        reduction = _reduction.legacy_get_enum(a["size_average"], a["reduce"])
    else:
        reduction = _reduction.get_enum(a["reduction"])
    call = (a["input"], a["target"], a["weight"], a["pos_weight"], reduction)
    if not (isinstance(a["input"], torch.Tensor) and isinstance(a["target"], torch.Tensor)
            and a["input"].shape == a["target"].shape and _dense(call, {})):
        return None
    return call


def _dense(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Every tensor argument a plain strided one, of one floating dtype."""
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    return all(t.layout == torch.strided and t.is_floating_point() for t in tensors) \
        and len({t.dtype for t in tensors}) == 1


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
