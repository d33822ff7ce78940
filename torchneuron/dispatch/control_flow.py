"""``torch.cond`` and ``while_loop`` over neuron tensors, run as PyTorch runs them on CPU.

Why: in eager mode ``torch.cond`` first traces itself with Dynamo (which checks that
both branches return tensors of the same kind), then runs the chosen branch. PyTorch's
rule for tracing ``cond`` under a fake mode requires the branches' results to be
exactly ``FakeTensor``s, and a neuron tensor being traced is a wrapper around one, so
every ``torch.cond`` on the device failed ("expected both a and b to be FakeTensor"),
in eager and under ``torch.compile``. PyTorch has no rule for
the higher-order op over a tensor subclass either.

Two rules fix both: under a fake mode, ``cond`` runs PyTorch's own fake rule on the
wrapped buffers (the branches see neuron tensors again, so their ops dispatch as
usual); on real neuron tensors, it runs the branch the predicate picks, which is what
PyTorch's CPU kernel does (autograd above it is PyTorch's ``CondAutogradOp``).
``while_loop`` needs only the second kind (its fake rule takes wrappers), and Dynamo's
aliasing check of its inputs learns to read a wrapper's storage (``dynamo/hop_storages``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._higher_order_ops.cond import cond_op
from torch._higher_order_ops.while_loop import while_loop_dense, while_loop_op
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_flatten, tree_unflatten

from torchneuron.device.tensor import NeuronTensor

__all__ = ["install"]

_fake_rule: Callable[..., Any] | None = None


def _device_index(tree: Any) -> int | None:
    for t in tree_flatten(tree)[0]:
        if isinstance(t, NeuronTensor):
            return t._device_index
    return None


def _unwrap(tree: Any) -> tuple[Any, list[bool]]:
    """``tree`` with each neuron tensor replaced by its buffer, and which leaves were."""
    flat, spec = tree_flatten(tree)
    mask = [isinstance(t, NeuronTensor) for t in flat]
    return tree_unflatten([t.buffer if m else t for t, m in zip(flat, mask, strict=True)], spec), mask


def _rewrap(tree: Any, mask: list[bool], index: int) -> Any:
    """The inverse of ``_unwrap`` for traced buffers (nothing is accounted)."""
    flat, spec = tree_flatten(tree)
    return tree_unflatten(
        [NeuronTensor(t, index) if m else t for t, m in zip(flat, mask, strict=True)], spec
    )


def _lift(fn: Callable[..., Any], in_mask: list[bool], index: int,
          out_mask: list[bool]) -> Callable[..., Any]:
    """Branch ``fn`` (over neuron tensors) as a function of the buffers; the leaves of its
    result that were neuron tensors are recorded in ``out_mask``."""

    def branch(*buffers: Any) -> Any:
        out, mask = _unwrap(fn(*_rewrap(list(buffers), in_mask, index)))
        out_mask[:] = mask
        return out

    return branch


def _traced_cond(run: Callable[..., Any], pred: Any, true_fn: Any, false_fn: Any,
                 operands: Any, index: int) -> Any:
    """``run`` (a cond rule) over the buffers of traced neuron tensors, rewrapped."""
    upred = _unwrap(pred)[0]
    uops, mask = _unwrap(list(operands))
    out_mask: list[bool] = []
    out = run(upred, _lift(true_fn, mask, index, out_mask),
              _lift(false_fn, mask, index, out_mask), tuple(uops))
    return _rewrap(out, out_mask, index)


def _fake_cond(mode: FakeTensorMode, pred: Any, true_fn: Any, false_fn: Any,
               operands: Any) -> Any:
    """PyTorch's fake-mode rule for ``cond``, over the buffers of neuron tensors."""
    assert _fake_rule is not None
    index = _device_index((pred, operands))
    if index is None:
        return _fake_rule(mode, pred, true_fn, false_fn, operands)
    return _traced_cond(lambda *a: _fake_rule(mode, *a), pred, true_fn, false_fn,
                        operands, index)


def _neuron_cond(pred: Any, true_fn: Any, false_fn: Any, operands: Any) -> Any:
    """``cond`` on neuron tensors: the branch the predicate picks (reading it is a sync)."""
    index = _device_index((pred, operands))
    flat = tree_flatten((pred, operands))[0]
    if any(isinstance(t, NeuronTensor) and type(t.buffer) is not torch.Tensor for t in flat):
        # traced without a mode in charge: PyTorch's rules over the fake buffers
        return _traced_cond(cond_op, pred, true_fn, false_fn, operands, index)  # type: ignore[arg-type]
    return true_fn(*operands) if pred else false_fn(*operands)


def install() -> None:
    """Register the two rules on PyTorch's ``cond`` operator (idempotent)."""
    global _fake_rule
    if _fake_rule is not None:
        return
    _fake_rule = cond_op.python_key_table[FakeTensorMode]
    cond_op.python_key_table[FakeTensorMode] = _fake_cond
    cond_op.py_impl(NeuronTensor)(_neuron_cond)
    cond_op._dispatch_cache.clear()
    # while_loop: PyTorch's CPU kernel (cond_fn read each turn, body_fn run) as it is
    while_loop_op.py_impl(NeuronTensor)(while_loop_dense)
