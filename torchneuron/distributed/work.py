"""What a collective or point-to-point call returns, and the host copies it works on.

``NeuronWork`` (PyTorch's ``Work``: ``wait`` completes the exchange and charges the
device clock), ``_Host`` (neuron tensors mapped to the CPU tensors gloo moves) and
``_nbytes``. Apart from ``backend`` so that ``p2p`` uses them without importing the
process group that calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from torchneuron.device.tensor import NeuronTensor
from torchneuron.distributed import clock

__all__ = ["NeuronWork"]


class NeuronWork(dist._Work):
    """A collective's handle: ``wait`` makes the compute queue wait for its simulated end
    (the host does not block, as with a CUDA stream); ``get_future`` is completed with the
    output tensors (what DDP's reducer reads)."""

    def __init__(self, result: Any, charge: clock.Charge | None,
                 finish: Callable[[], clock.Charge | None] | None = None) -> None:
        super().__init__()
        self._result = result
        self._charge = charge
        self._finish = finish
        self._future: torch.futures.Future = torch.futures.Future()
        if finish is None:
            self._future.set_result(result)

    def _complete(self) -> None:
        if self._finish is not None:
            finish, self._finish = self._finish, None
            self._charge = finish()
            self._future.set_result(self._result)

    def wait(self, timeout: timedelta | None = None) -> bool:
        self._complete()
        if self._charge is not None:
            self._charge.join()
        return True

    def get_future(self) -> torch.futures.Future:
        self._complete()
        return self._future

    def is_completed(self) -> bool:
        return self._finish is None

    def is_success(self) -> bool:
        return True

    def exception(self) -> None:
        return None

    def result(self) -> Any:
        self._complete()
        return self._result

    def source_rank(self) -> int:
        self._complete()
        return getattr(self, "_source_rank_value", -1)

    _source_rank = source_rank


def _flatten(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    out: list[torch.Tensor] = []
    for x in obj:
        out.extend(_flatten(x))
    return out


class _Host:
    """The CPU tensors gloo works on for a nest of neuron / CPU tensors, and the write-backs
    for those that are not contiguous (gloo needs dense memory)."""

    def __init__(self) -> None:
        self.writebacks: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.index: int | None = None

    def map(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return self.tensor(obj)
        return [self.map(x) for x in obj]

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, NeuronTensor):
            if self.index is None:
                self.index = t._device_index
            buf = t.buffer
        elif t.device.type == "cpu":
            buf = t
        else:
            raise RuntimeError(
                f"the neuron process group moves neuron and CPU tensors, got one on {t.device}; "
                "move it to 'neuron' (or 'cpu') first")
        if buf.is_contiguous():
            return buf
        tmp = buf.contiguous()
        self.writebacks.append((buf, tmp))
        return tmp

    def write_back(self) -> None:
        for buf, tmp in self.writebacks:
            buf.copy_(tmp)


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
