"""Load-time fusion of a one-sided clamp: ``select(x < t, b, x)`` as one torch call.

Why: ReLU (and ``clamp_min`` / ``clamp_max``, ``hardtanh``'s bounds) lowers to a
``compare`` of the input with a splat bound and a ``select`` of the splat bound or the
input (``decomp.relu``: eager keeps an element equal to the bound, so ``relu(-0.0)`` is
-0.0, which ``maximum`` would not give). That is two steps of the interpreter where
eager runs one kernel; on the CNN loop, whose activations are 16K-element tensors, the
compare allocates a mask and the select (``_specialize_math``'s bit form) reads three
tensors and makes four torch calls. Here the pair is one call of eager's own kernel:
``torch.relu(x)`` for ``LT`` with a ``+0.0`` bound, ``torch.clamp_min(x, b)`` for other
``LT`` bounds and ``torch.clamp_max(x, b)`` for ``GT``.

Same bits: ATen's CPU ``clamp_min(x, b)`` is ``b > x ? b : x`` per element (the scalar
loop's ``std::max(x, b)`` and the vector loop's ``max(b, x)``, which returns its second
operand on a tie or a NaN), so it writes ``b`` exactly where ``x < b`` and ``x``'s own
bits elsewhere: a NaN (any payload, either sign), a zero equal to the bound, infinities.
``clamp_max`` mirrors it. That is the ``select``'s result whenever the compare's splat
threshold equals ``b`` as a number (so the threshold's sign of zero does not matter)
and ``b`` is not NaN (``clamp_min`` gives NaN for a NaN bound; ``x < NaN`` is false).
Checked against the compare + select on this machine's vector widths (``default``,
``avx2``, ``avx512``), on contiguous and strided inputs, subnormals included
(``tests/compiler/interpreter/test_interpreter_collapse_clamp.py``). Collapsed only for float32
and float64: for float16 / bfloat16 the vector loop converts to float32 and back, which
quiets a signalling NaN (float16) or replaces every NaN by ``0xFFFF`` (bfloat16), while
the select keeps the input's bits.

With denormals flushed (``torch.set_flush_denormal(True)``, off by default) eager's
kernels write a subnormal result as a zero of its sign, and the select, which copies
bits, does not: there the fused op gives eager's bits (it is eager's kernel) and the
op-by-op pair does not. A subnormal bound is not fused: flushed when the kernel converts
it, it would be written as zero where the select writes the bound, and the eager op
(``clamp_min(x, b)``) is not known to be the one lowered.

The run is fused only when the threshold and bound are program constants (made in the
block from constants only, so the interpreter keeps them: the same tensors, never
written, on every run); they are checked by value on the first run and the check is
kept for those tensors. A threshold that is not one value, a bound that is not one bit
pattern, or one the kernel would not write as is runs the original two ops.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from torchneuron.compiler.interpreter._registry import OpFn, Runner
from torchneuron.compiler.interpreter._specialize_math import SAME_WIDTH_INT
from torchneuron.compiler.interpreter.collapse.base import _fallback, _make
from torchneuron.compiler.interpreter.collapse.relu import fusible_pair
from torchneuron.compiler.stablehlo.ir import Operation

__all__ = ["clamp_bound"]

_DTYPES = {"f32": torch.float32, "f64": torch.float64}  # the dtypes fused (docstring)
_KERNELS = {"LT": torch.clamp_min, "GT": torch.clamp_max}


def clamp_bound(g: Any, body: Any, at: int) -> tuple[Any, list[int]] | None:
    """The ``compare`` + ``select`` run ending at ``body[at]`` as one fused op."""
    sel, operands = body[at]
    if sel.name != "stablehlo.select" or len(operands) != 3:
        return None
    cmp = g.op(operands[0], "stablehlo.compare")
    if cmp is None or len(cmp[2]) != 2 or cmp[2][0] != operands[2]:
        return None  # not ``select(x ? t, b, x)`` with the compared ``x`` itself
    c_op = cmp[1]
    direction = c_op.attributes.get("comparison_direction")
    out_t = sel.result_types[0]
    run_ids = fusible_pair(g, body, at, cmp, sel, tuple(_KERNELS), (cmp[2][1], operands[1]))
    if run_ids is None:
        return None  # a threshold or bound read at run time: checked once, it could go stale
    run_ops = [body[i] for i in run_ids]
    outer = (cmp[2][0], cmp[2][1], operands[1])
    impl = _clamp(direction, _DTYPES[out_t.dtype], _fallback(run_ops, outer))
    return _make(sel, outer, run_ops, impl, "clamp_bound"), run_ids


def _bound(t: torch.Tensor, b: torch.Tensor, dt: torch.dtype) -> float | None:
    """The bound the kernel writes, if ``select(x ? t, b, x)`` is its clamp (docstring):
    ``t`` one value, ``b`` one bit pattern of that value, neither NaN nor subnormal."""
    if t.dtype != dt or b.dtype != dt or not t.numel() or not b.numel():
        return None
    itype = SAME_WIDTH_INT[dt.itemsize]
    bits = b.reshape(-1)[:1]
    if not bool((b.reshape(-1).view(itype) == bits.view(itype)).all()):
        return None
    value = float(bits)
    if math.isnan(value) or (value != 0.0 and abs(value) < torch.finfo(dt).tiny):
        return None
    if not bool((t == value).all()):  # (a NaN threshold fails here too)
        return None
    return value


def _clamp(direction: str, dt: torch.dtype, slow: OpFn) -> OpFn:
    """The fused callable of ``clamp_bound``."""
    checked: list[Any] = [None, None]  # [the constants last checked, the kernel or None]

    def clamp(op: Operation, args: list[Any], run: Runner) -> list[Any]:
        x, t, b = args
        if checked[0] is None or checked[0][0] is not t or checked[0][1] is not b:
            checked[:] = [(t, b), _kernel(direction, _bound(t, b, dt))]
        kernel = checked[1]
        if kernel is None or x.dtype is not dt:
            return slow(op, args, run)
        return [kernel(x)]

    return clamp


def _kernel(direction: str, bound: float | None) -> Any:
    """Eager's kernel for the clamp: ``torch.relu`` (``clamp_min(x, 0)``, one dispatch
    less) for a ``+0.0`` lower bound; None when there is no such clamp."""
    if bound is None:
        return None
    if direction == "LT" and bound == 0.0 and math.copysign(1.0, bound) > 0:
        return torch.relu
    fn = _KERNELS[direction]
    return lambda x: fn(x, bound)
