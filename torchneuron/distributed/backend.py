"""The ``neuron`` process group: PyTorch's collectives between simulated NeuronCores.

Why a Python ``ProcessGroup`` over an inner gloo group: the data must really move between the
rank processes, and gloo (built from the store PyTorch hands the factory) already moves CPU
tensors; a neuron tensor's values live in a CPU buffer, so each collective hands gloo the
buffers (or contiguous copies written back after) and the neuron tensors see the result in
place. What gloo cannot say is how long it took on Trainium: every collective is also placed
on the ranks' simulated clocks (``clock``), ending at the same moment on every rank.

A Python group replaces the whole group (PyTorch keeps no per-device backends beside it), so
this one accepts CPU tensors too: they move through the same gloo group and charge no
simulated time. Collectives run synchronously in the calling thread (ranks issue them in the
same order, as PyTorch requires); point-to-point is asynchronous (``isend`` / ``irecv`` are
completed by ``Work.wait``), because ranks post sends and receives in different orders.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

from torchneuron.device.module import current_device
from torchneuron.device.tensor import NeuronTensor
from torchneuron.distributed import clock
from torchneuron.distributed.work import NeuronWork, _flatten, _Host, _nbytes
from torchneuron.hardware import current_profile, get_core
from torchneuron.hardware.collectives import Topology, get_topology

__all__ = ["NeuronProcessGroup", "NeuronWork", "create_process_group"]

ReduceOp = dist.ReduceOp
_UNSUPPORTED_OPS = (ReduceOp.PREMUL_SUM,)


def _op_code(op: Any) -> Any:
    return op.op if isinstance(op, ReduceOp) else op


class NeuronProcessGroup(dist.ProcessGroup):
    """``dist.init_process_group("neuron")``'s group: gloo transport, simulated time."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta,
                 global_ranks: list[int] | None = None) -> None:
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._timeout = timeout
        self._global_ranks = list(global_ranks) if global_ranks else list(range(size))
        self._topology: Topology = get_topology(current_profile().name)

    def getBackendName(self) -> str:  # noqa: N802  (the names PyTorch's trampoline calls)
        return "neuron"

    # PyTorch keeps a group's name and description in its C++ backends, which a Python
    # group has none of: kept here (functional collectives and DeviceMesh look groups up
    # by name).
    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._group_name = name

    def getGroupName(self) -> str:  # noqa: N802
        return getattr(self, "_group_name", "")

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._group_desc = desc

    def getGroupDesc(self) -> str:  # noqa: N802
        return getattr(self, "_group_desc", "")

    # --- the common path ---------------------------------------------------------------
    def _exchange(self, index: int | None, op: str, nbytes: int, dtype: torch.dtype | None,
                  check: bool = True) -> int:
        """The latest arrival over the group; raise on all ranks if the calls disagree."""
        arrival = clock.arrival_ns(index) if index is not None else 0
        sig = clock.signature(op, nbytes, dtype) if check else 0
        t = torch.tensor([arrival, sig, -sig], dtype=torch.int64)
        opts = dist.AllreduceOptions()
        opts.reduceOp = ReduceOp.MAX
        self._gloo.allreduce([t], opts).wait()
        if check and (int(t[1]) != sig or int(-t[2]) != sig):
            raise RuntimeError(
                f"neuron process group: ranks called {op} with different tensors: this rank "
                f"(rank {self.rank()}) has {nbytes} bytes of {dtype}, another rank has a "
                "different size or dtype. Every rank must pass tensors of the same shape and "
                "dtype to a collective.")
        return int(t[0])

    def _collective(self, op: str, tensors: Any, nbytes: int, run: Callable[..., Any],
                    result: Any, *, check: bool = True, cost_bytes: int | None = None) -> NeuronWork:
        """Exchange arrivals, move the data with ``run`` (given the host tensors), write back,
        charge ``op`` on ``cost_bytes`` (nccom-test's size; default ``nbytes``)."""
        flat = _flatten(tensors)
        host = _Host()
        index = next((t._device_index for t in flat if isinstance(t, NeuronTensor)), None)
        if index is not None:
            get_core(index).notify_sync("collective")  # a deferred region ends before it
        dtype = flat[0].dtype if flat else None
        start = self._exchange(index, op, nbytes, dtype, check)
        mapped = host.map(tensors)
        run(mapped)
        host.write_back()
        charge = None
        if index is not None:
            size = nbytes if cost_bytes is None else cost_bytes
            charge = clock.charge(index, op, size, self._global_ranks, start, self._topology)
        return NeuronWork(result, charge)

    def _reduce_opts(self, opts: Any, cls: Any) -> tuple[Any, bool]:
        """Options for gloo: AVG becomes SUM then a division (gloo has no AVG)."""
        code = _op_code(opts.reduceOp)
        if code in _UNSUPPORTED_OPS:
            raise RuntimeError(
                "neuron process group: ReduceOp.PREMUL_SUM is not supported (its transport, "
                "gloo, has none); scale the tensor, then reduce with ReduceOp.SUM")
        if code != ReduceOp.AVG:
            return opts, False
        new = cls()
        new.reduceOp = ReduceOp.SUM
        for name in ("rootRank", "rootTensor", "timeout"):
            if hasattr(opts, name):
                setattr(new, name, getattr(opts, name))
        return new, True

    def _average(self, tensors: list[torch.Tensor]) -> None:
        for t in tensors:
            if t.is_floating_point() or t.is_complex():
                t.div_(self.size())
            else:
                t.copy_(torch.div(t, self.size(), rounding_mode="trunc"))

    # --- all-reduce family ---------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        opts = dist.AllreduceOptions() if opts is None else opts
        gopts, avg = self._reduce_opts(opts, dist.AllreduceOptions)

        def run(h: list[torch.Tensor]) -> None:
            self._gloo.allreduce(h, gopts).wait()
            if avg:
                self._average(h)

        return self._collective("all_reduce", tensors, _nbytes(tensors), run, tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        opts = dist.AllreduceCoalescedOptions() if opts is None else opts
        gopts, avg = self._reduce_opts(opts, dist.AllreduceCoalescedOptions)

        def run(h: list[torch.Tensor]) -> None:
            self._gloo.allreduce_coalesced(h, gopts).wait()
            if avg:
                self._average(h)

        return self._collective("all_reduce", tensors, _nbytes(tensors), run, tensors)

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        opts = dist.ReduceOptions() if opts is None else opts
        gopts, avg = self._reduce_opts(opts, dist.ReduceOptions)
        root = opts.rootRank

        def run(h: list[torch.Tensor]) -> None:
            self._gloo.reduce(h, gopts).wait()
            if avg and self.rank() == root:
                self._average(h)

        return self._collective("reduce", tensors, _nbytes(tensors), run, tensors)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        opts = dist.BroadcastOptions() if opts is None else opts
        return self._collective("broadcast", tensors, _nbytes(tensors),
                                lambda h: self._gloo.broadcast(h, opts).wait(), tensors)

    # --- gather family -------------------------------------------------------------------
    def allgather(self, output_tensors: list[list[torch.Tensor]],
                  input_tensors: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        opts = _c10d.AllgatherOptions() if opts is None else opts
        return self._collective(
            "all_gather", [output_tensors, input_tensors], _nbytes(input_tensors),
            lambda h: self._gloo.allgather(h[0], h[1], opts).wait(), output_tensors,
            cost_bytes=_nbytes(input_tensors) * self.size())

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,
                          opts: Any = None) -> NeuronWork:
        opts = _c10d.AllgatherOptions() if opts is None else opts
        return self._collective(
            "all_gather", [output, input], _nbytes([input]),
            lambda h: self._gloo._allgather_base(h[0], h[1], opts).wait(), [output],
            cost_bytes=_nbytes([output]))

    _allgather_base = all_gather_single

    def allgather_coalesced(self, output_lists: list[list[torch.Tensor]],
                            input_list: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        opts = _c10d.AllgatherOptions() if opts is None else opts
        return self._collective(
            "all_gather", [output_lists, input_list], _nbytes(input_list),
            lambda h: self._gloo.allgather_coalesced(h[0], h[1], opts).wait(), output_lists,
            cost_bytes=_nbytes(input_list) * self.size())

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        opts = _c10d.AllgatherOptions() if opts is None else opts

        def run(h: list[list[torch.Tensor]]) -> None:
            for out, inp in zip(h[0], h[1], strict=True):
                self._gloo._allgather_base(out, inp, opts).wait()

        return self._collective("all_gather", [outputs, inputs], _nbytes(inputs), run, outputs,
                                cost_bytes=_nbytes(outputs))

    def gather(self, output_lists: list[list[torch.Tensor]], input_list: list[torch.Tensor],
               opts: Any = None) -> NeuronWork:
        opts = dist.GatherOptions() if opts is None else opts
        return self._collective(
            "gather", [output_lists, input_list], _nbytes(input_list),
            lambda h: self._gloo.gather(h[0], h[1], opts).wait(), output_lists,
            cost_bytes=_nbytes(input_list) * self.size())

    def scatter(self, output_list: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
                opts: Any = None) -> NeuronWork:
        opts = dist.ScatterOptions() if opts is None else opts
        return self._collective(
            "scatter", [output_list, input_lists], _nbytes(output_list),
            lambda h: self._gloo.scatter(h[0], h[1], opts).wait(), output_list,
            cost_bytes=_nbytes(output_list) * self.size())

    # --- reduce-scatter family -----------------------------------------------------------
    def reduce_scatter(self, output_list: list[torch.Tensor],
                       input_lists: list[list[torch.Tensor]], opts: Any = None) -> NeuronWork:
        opts = dist.ReduceScatterOptions() if opts is None else opts
        gopts, avg = self._reduce_opts(opts, dist.ReduceScatterOptions)

        def run(h: list[Any]) -> None:
            self._gloo.reduce_scatter(h[0], h[1], gopts).wait()
            if avg:
                self._average(h[0])

        return self._collective("reduce_scatter", [output_list, input_lists],
                                _nbytes(output_list), run, output_list,
                                cost_bytes=_nbytes(output_list) * self.size())

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,
                              opts: Any = None) -> NeuronWork:
        opts = dist.ReduceScatterOptions() if opts is None else opts
        gopts, avg = self._reduce_opts(opts, dist.ReduceScatterOptions)

        def run(h: list[torch.Tensor]) -> None:
            self._gloo._reduce_scatter_base(h[0], h[1], gopts).wait()
            if avg:
                self._average([h[0]])

        return self._collective("reduce_scatter", [output, input], _nbytes([input]), run,
                                [output])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor], opts: Any = None) -> NeuronWork:
        opts = dist.ReduceScatterOptions() if opts is None else opts
        gopts, avg = self._reduce_opts(opts, dist.ReduceScatterOptions)

        def run(h: list[list[torch.Tensor]]) -> None:
            for out, inp in zip(h[0], h[1], strict=True):
                self._gloo._reduce_scatter_base(out, inp, gopts).wait()
            if avg:
                self._average(h[0])

        return self._collective("reduce_scatter", [outputs, inputs], _nbytes(inputs), run,
                                outputs)

    # --- all-to-all ----------------------------------------------------------------------
    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,
                      output_split_sizes: list[int], input_split_sizes: list[int],
                      opts: Any = None) -> NeuronWork:
        opts = dist.AllToAllOptions() if opts is None else opts
        uneven = bool(output_split_sizes) or bool(input_split_sizes)
        return self._collective(
            "all_to_all", [output, input], _nbytes([input]),
            lambda h: self._gloo.alltoall_base(h[0], h[1], output_split_sizes,
                                               input_split_sizes, opts).wait(),
            [output], check=not uneven)

    all_to_all_single = alltoall_base

    def alltoall(self, output_list: list[torch.Tensor], input_list: list[torch.Tensor],
                 opts: Any = None) -> NeuronWork:
        opts = dist.AllToAllOptions() if opts is None else opts
        return self._collective(
            "all_to_all", [output_list, input_list], _nbytes(input_list),
            lambda h: self._gloo.alltoall(h[0], h[1], opts).wait(), output_list, check=False)

    def barrier(self, opts: Any = None) -> NeuronWork:
        index = current_device()
        start = self._exchange(index, "barrier", 0, None)
        charge = clock.charge(index, "barrier", 0, self._global_ranks, start, self._topology)
        return NeuronWork([], charge)

    # --- point-to-point ------------------------------------------------------------------
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> NeuronWork:
        from torchneuron.distributed.p2p import send

        return send(self, tensors, dst, tag)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> NeuronWork:
        from torchneuron.distributed.p2p import recv

        return recv(self, tensors, src, tag)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> NeuronWork:
        from torchneuron.distributed.p2p import recv

        return recv(self, tensors, None, tag)

    def shutdown(self) -> None:
        self._gloo.shutdown()

    def abort(self) -> None:
        self._gloo.abort()

    def __repr__(self) -> str:
        return f"NeuronProcessGroup(rank={self.rank()}, size={self.size()})"


# Dynamo must not trace into the group (it sees a C++ opaque object and fails hard on its
# Python attributes): a collective reached from compiled code is a graph break, run eagerly,
# as a C++ group's method is.
for _name in ("allreduce", "allreduce_coalesced", "reduce", "broadcast", "allgather",
              "all_gather_single", "allgather_coalesced", "allgather_into_tensor_coalesced",
              "gather", "scatter", "reduce_scatter", "reduce_scatter_single",
              "reduce_scatter_tensor_coalesced", "alltoall_base", "alltoall", "barrier", "send",
              "recv", "recv_anysource"):
    setattr(NeuronProcessGroup, _name, torch.compiler.disable(getattr(NeuronProcessGroup, _name),
                                                              recursive=True))
NeuronProcessGroup._allgather_base = NeuronProcessGroup.all_gather_single
NeuronProcessGroup._reduce_scatter_base = NeuronProcessGroup.reduce_scatter_single
NeuronProcessGroup.all_to_all_single = NeuronProcessGroup.alltoall_base


def create_process_group(opts: Any, pg_options: Any = None) -> NeuronProcessGroup:
    """The factory ``Backend.register_backend("neuron", ..., extended_api=True)`` calls."""
    from torchneuron.distributed.fsdp import install_storage_resize
    from torchneuron.distributed.functional import install_functional_rules

    # imported only by processes that create a group (FSDP2 and funcol load DTensor)
    install_storage_resize()
    install_functional_rules()
    if pg_options is not None:
        raise ValueError(
            f"the neuron backend takes no backend options, got {pg_options!r}; call "
            "init_process_group('neuron') without pg_options")
    return NeuronProcessGroup(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                              list(opts.global_ranks_in_group or []))
