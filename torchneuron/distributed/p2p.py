"""Point-to-point between neuron ranks: ``send`` / ``recv`` / ``isend`` / ``irecv``.

Why asynchronous: ranks post sends and receives in their own orders (a ring's ``isend`` then
``irecv``, ``batch_isend_irecv``, pipeline schedules), so nothing here waits for the peer
when it is posted; ``Work.wait`` completes it. Each send carries a small header ahead of the
data: the sender's simulated arrival and a signature of size and dtype; each receive answers
with its own arrival (on a tag of its own, ``_REPLY_TAG``, so it never meets the user's
messages). Both ends then place the transfer from the later of the two arrivals, and it
ends at the same simulated moment on both ranks, as a collective does; a mismatched pair
raises a clear error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from torchneuron.device.tensor import NeuronTensor
from torchneuron.distributed import clock
from torchneuron.distributed.work import NeuronWork, _Host, _nbytes
from torchneuron.hardware import get_core

if TYPE_CHECKING:
    from torchneuron.distributed.backend import NeuronProcessGroup

__all__ = ["send", "recv"]

_REPLY_TAG = 1 << 30  # added to the user's tag: the receiver's arrival, back to the sender


def _prepare(tensors: list[torch.Tensor]) -> tuple[Any, int | None, list[torch.Tensor], int]:
    host = _Host()
    mapped = host.map(tensors)
    index = next((t._device_index for t in tensors if isinstance(t, NeuronTensor)), None)
    if index is not None:
        get_core(index).notify_sync("collective")
    return host, index, mapped, _nbytes(tensors)


def send(pg: NeuronProcessGroup, tensors: list[torch.Tensor], dst: int, tag: int) -> NeuronWork:
    """Post the header and the data to group rank ``dst``; the send ends on this rank's
    clock at its own arrival plus the transfer's cost."""
    _, index, mapped, nbytes = _prepare(tensors)
    arrival = clock.arrival_ns(index) if index is not None else 0
    sig = clock.signature("send_recv", nbytes, tensors[0].dtype)
    header = torch.tensor([arrival, sig], dtype=torch.int64)
    reply = torch.zeros(1, dtype=torch.int64)
    works = [pg._gloo.send([header], dst, tag), pg._gloo.send(mapped, dst, tag),
             pg._gloo.recv([reply], dst, tag + _REPLY_TAG)]

    def finish() -> clock.Charge | None:
        for w in works:
            w.wait()
        assert header is not None  # kept alive until gloo has sent it
        if index is None:
            return None
        pair = [pg._global_ranks[pg.rank()], pg._global_ranks[dst]]
        return clock.charge(index, "send_recv", nbytes, pair, max(arrival, int(reply[0])),
                            pg._topology, label=f"send to {dst}", in_order=False)

    return NeuronWork(tensors, None, finish)


def recv(pg: NeuronProcessGroup, tensors: list[torch.Tensor], src: int | None,
         tag: int) -> NeuronWork:
    """Post the receives from group rank ``src`` (any rank if None); ``wait`` completes
    them, checks the header and charges the transfer from the later arrival."""
    host, index, mapped, nbytes = _prepare(tensors)
    arrival = clock.arrival_ns(index) if index is not None else 0
    header = torch.zeros(2, dtype=torch.int64)
    reply = torch.tensor([arrival], dtype=torch.int64)
    if src is None:
        header_work = pg._gloo.recv_anysource([header], tag)
        data_work = reply_work = None
    else:
        header_work = pg._gloo.recv([header], src, tag)
        data_work = pg._gloo.recv(mapped, src, tag)
        reply_work = pg._gloo.send([reply], src, tag + _REPLY_TAG)
    work: NeuronWork

    def finish() -> clock.Charge | None:
        header_work.wait()
        peer = header_work._source_rank() if src is None else src
        work._source_rank_value = peer  # type: ignore[attr-defined]
        dw = data_work if data_work is not None else pg._gloo.recv(mapped, peer, tag)
        rw = reply_work if reply_work is not None else pg._gloo.send(
            [reply], peer, tag + _REPLY_TAG)
        dw.wait()
        rw.wait()
        host.write_back()
        sig = clock.signature("send_recv", nbytes, tensors[0].dtype)
        if int(header[1]) != sig:
            raise RuntimeError(
                f"neuron process group: rank {pg.rank()} received from rank {peer} into "
                f"{nbytes} bytes of {tensors[0].dtype}, but the sender sent a tensor of "
                "another size or dtype. send and recv must use tensors of the same shape "
                "and dtype.")
        if index is None:
            return None
        pair = [pg._global_ranks[peer], pg._global_ranks[pg.rank()]]
        return clock.charge(index, "send_recv", nbytes, pair, max(arrival, int(header[0])),
                            pg._topology, label=f"recv from {peer}", in_order=False)

    work = NeuronWork(tensors, None, finish)
    work._source_rank_value = -1 if src is None else src  # type: ignore[attr-defined]
    return work
