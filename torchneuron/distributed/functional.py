"""Functional collectives (``torch.distributed._functional_collectives``) on neuron tensors.

Why: DTensor, tensor parallelism and ``DeviceMesh`` code call ``torch.ops._c10d_functional.*``,
which reach the neuron tensor's dispatch like any op. Run there on the tensors' CPU buffers
they would move the right values (the group accepts CPU tensors) but charge no simulated time,
and ``_wrap_tensor_autograd`` would wrap a CPU ``AsyncCollectiveTensor`` as if it were a buffer.
These dispatch rules for ``NeuronTensor`` run the collective through the group's own methods
on the neuron tensors, so it lands on the collective queue; ``wait_tensor`` makes the compute
queue wait for it, as a CUDA stream would. Ops without a rule here (the coalesced variants)
still take the buffer path: right values, no simulated time.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

from torchneuron.device.tensor import NeuronTensor

__all__ = ["install_functional_rules"]

_REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX, "band": dist.ReduceOp.BAND,
    "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR,
}
_installed = False


def _group(name: str) -> Any:
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(name)


def _reduce_op(name: str) -> Any:
    try:
        return _REDUCE_OPS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown reduce op {name!r}; known: {', '.join(_REDUCE_OPS)}") from None


def _pending(out: torch.Tensor, work: Any) -> torch.Tensor:
    """Remember ``work`` on its output until ``wait_tensor``."""
    out.__dict__["_neuron_collective"] = work
    return out


def _all_reduce(x: torch.Tensor, op: str, group: str, inplace: bool) -> torch.Tensor:
    out = x if inplace else x.clone()
    opts = _c10d.AllreduceOptions()
    opts.reduceOp = _reduce_op(op)
    return _pending(out, _group(group).allreduce([out], opts))


def _all_gather(x: torch.Tensor, size: int, group: str) -> torch.Tensor:
    x = x.contiguous()
    out = x.new_empty((x.shape[0] * size, *x.shape[1:]))
    return _pending(out, _group(group).all_gather_single(out, x, _c10d.AllgatherOptions()))


def _reduce_scatter(x: torch.Tensor, op: str, size: int, group: str) -> torch.Tensor:
    x = x.contiguous()
    out = x.new_empty((x.shape[0] // size, *x.shape[1:]))
    opts = _c10d.ReduceScatterOptions()
    opts.reduceOp = _reduce_op(op)
    return _pending(out, _group(group).reduce_scatter_single(out, x, opts))


def _all_to_all(x: torch.Tensor, out_splits: list[int] | None, in_splits: list[int] | None,
                group: str) -> torch.Tensor:
    x = x.contiguous()
    rows = sum(out_splits) if out_splits else x.shape[0]
    out = x.new_empty((rows, *x.shape[1:]))
    work = _group(group).alltoall_base(out, x, list(out_splits or []), list(in_splits or []),
                                      _c10d.AllToAllOptions())
    return _pending(out, work)


def _broadcast(x: torch.Tensor, src: int, group: str, inplace: bool) -> torch.Tensor:
    out = x if inplace else x.clone()
    opts = _c10d.BroadcastOptions()
    opts.rootRank = src
    return _pending(out, _group(group).broadcast([out], opts))


def _wait(x: torch.Tensor) -> torch.Tensor:
    work = x.__dict__.pop("_neuron_collective", None)
    if work is not None:
        work.wait()
    return x


def _rules() -> dict[str, Any]:
    ops = torch.ops._c10d_functional
    return {
        ops.all_reduce.default: lambda a, k: _all_reduce(*a, inplace=False, **k),
        ops.all_reduce_.default: lambda a, k: _all_reduce(*a, inplace=True, **k),
        ops.all_gather_into_tensor.default: lambda a, k: _all_gather(*a, **k),
        ops.reduce_scatter_tensor.default: lambda a, k: _reduce_scatter(*a, **k),
        ops.all_to_all_single.default: lambda a, k: _all_to_all(*a, **k),
        ops.broadcast.default: lambda a, k: _broadcast(*a, inplace=False, **k),
        ops.broadcast_.default: lambda a, k: _broadcast(*a, inplace=True, **k),
        ops.wait_tensor.default: lambda a, k: _wait(*a, **k),
    }


def install_functional_rules() -> None:
    """Register the rules for ``NeuronTensor`` (idempotent; before any of these ops runs on
    a neuron tensor, since the device caches its answer per op)."""
    global _installed
    if _installed:
        return
    from torch.distributed import _functional_collectives as funcol

    for op, impl in _rules().items():
        def rule(cls: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None,
                 _impl: Any = impl) -> Any:
            return _impl(tuple(args), dict(kwargs or {}))

        torch.library.register_torch_dispatch(op, NeuronTensor, rule)

    def wrap_rule(cls: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return funcol.AsyncCollectiveTensor(args[0])

    torch.library.register_torch_dispatch(
        torch.ops._c10d_functional._wrap_tensor_autograd.default, NeuronTensor, wrap_rule)
    _installed = True
