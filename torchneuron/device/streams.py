"""``torch.neuron`` streams, mirroring ``torch.cuda.Stream`` / ``current_stream`` / ``stream``.

Why streams at all: code written for CUDA creates side streams, makes one wait for
another and runs work under ``with torch.cuda.stream(s):``; ported to ``neuron`` it
must run unchanged. The simulated NeuronCore has **one in-order queue** per core
(what a single NeuronCore executes in order), so every stream of a device is a
handle on that queue for compute: ``wait_stream`` / ``wait_event`` have no compute to
wait for (earlier work already precedes later work), ``synchronize`` waits for the whole
queue, and ``query`` says whether the host has caught up with it. Compute is
therefore never reordered, which is always a valid schedule of the CUDA program.
The one thing a side stream holds apart is a wait for a collective (the core's
collective queue, ``hardware.collectives``): a collective waited for under a side stream
(FSDP2's all-gather and reduce-scatter streams) delays the compute queue only where
the default stream waits for that stream or an event recorded on it, so it overlaps
the compute issued in between, as on CUDA.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from torchneuron.device.current import current_device, device_index
from torchneuron.hardware import get_core
from torchneuron.hardware.collectives import collective_queue, peek_collective_queue

__all__ = ["Event", "Stream", "StreamContext", "current_stream", "default_stream", "set_stream", "stream"]

_ids = itertools.count(1)  # stream 0 is each device's default stream
_current: dict[int, Stream] = {}


def _device_index(device: Any) -> int:
    return device_index(device)


class Stream:
    """A handle on device ``neuron:N``'s in-order work queue (see the module docstring)."""

    def __init__(self, device: Any = None, priority: int = 0, *, _stream_id: int | None = None):
        self.device_index = _device_index(device)
        self.priority = priority
        self.stream_id = next(_ids) if _stream_id is None else _stream_id

    @property
    def device(self) -> torch.device:
        return torch.device("neuron", self.device_index)

    def query(self) -> bool:
        """True when all work enqueued on this device has completed (simulated clock)."""
        timeline = get_core(self.device_index).timeline
        return timeline.host_ns >= timeline.device_free_ns

    def synchronize(self) -> None:
        core = get_core(self.device_index)
        core.synchronize()
        q = peek_collective_queue(core)
        if q is not None and q.pending_ns(self.stream_id):
            core.wait_event(q.pending_ns(self.stream_id))

    def wait_event(self, event: Any) -> None:
        """Later work waits for ``event``: compute already does (one in-order queue); a
        collective the event's stream waited for is waited for now (``_wait``)."""
        self._wait(getattr(event, "_pending_ns", 0))

    def wait_stream(self, stream: Stream) -> None:
        """Later work waits for ``stream``'s: compute already does; collectives ``stream``
        waits for are waited for now (``_wait``)."""
        q = peek_collective_queue(get_core(self.device_index))
        if q is not None:
            self._wait(q.pending_ns(stream.stream_id))

    def _wait(self, end_ns: int) -> None:
        """This stream waits for a collective ending at ``end_ns`` (the default stream:
        the compute queue; a side stream passes it on to those that wait for it)."""
        if end_ns:
            core = get_core(self.device_index)
            collective_queue(core).wait_on(core.timeline, self.stream_id, end_ns)

    def record_event(self, event: Any = None) -> Any:
        event = Event() if event is None else event
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Stream)
            and (self.device_index, self.stream_id) == (other.device_index, other.stream_id)
        )

    def __hash__(self) -> int:
        return hash((self.device_index, self.stream_id))

    def __repr__(self) -> str:
        return f"<torch.neuron.Stream device=neuron:{self.device_index} stream_id={self.stream_id}>"


def default_stream(device: Any = None) -> Stream:
    return Stream(device, _stream_id=0)


def current_stream(device: Any = None) -> Stream:
    index = _device_index(device)
    return _current.get(index) or default_stream(index)


def set_stream(s: Stream | None) -> None:
    if s is not None:
        _current[s.device_index] = s


class StreamContext:
    """``with torch.neuron.stream(s):`` makes ``s`` current for its device, then restores."""

    def __init__(self, s: Stream | None) -> None:
        self.stream = s
        self.prev: Stream | None = None

    def __enter__(self) -> Stream | None:
        if self.stream is not None:
            self.prev = current_stream(self.stream.device_index)
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self.stream is not None:
            set_stream(self.prev)


def stream(s: Stream | None) -> StreamContext:
    return StreamContext(s)


class Event:
    """A marker in the device's work queue; ``elapsed_time`` is simulated milliseconds.

    Kept with ``Stream`` (as ``torch.cuda.streams`` keeps both): recording one notes the
    collectives its stream waits for, and waiting on one passes them to another stream."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False) -> None:
        self.enable_timing = enable_timing
        self._ns: int | None = None
        self._index: int | None = None
        self._pending_ns = 0  # collectives its stream waited for end then

    def record(self, stream: Any = None) -> None:
        self._index = current_device()
        core = get_core(self._index)
        core.notify_sync("event")
        self._ns = core.record_event()
        q = peek_collective_queue(core)
        if q is not None:
            sid = current_stream(self._index).stream_id if stream is None else stream.stream_id
            self._pending_ns = q.pending_ns(sid)
            self._ns = max(self._ns, self._pending_ns)

    def query(self) -> bool:
        if self._ns is None:
            return True
        return get_core(self._index).timeline.host_ns >= self._ns

    def synchronize(self) -> None:
        if self._ns is not None:
            core = get_core(self._index)
            core.notify_sync("event")
            core.timeline.wait_event(self._ns)

    def wait(self, stream: Any = None) -> None:
        """Device-side wait: compute is in order on our single queue; a collective the
        event's stream waited for is waited for by ``stream`` (default: the current one)."""
        if self._pending_ns:
            (stream if stream is not None else current_stream(self._index)).wait_event(self)

    def elapsed_time(self, end_event: Event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Events must be created with enable_timing=True to measure time")
        if self._ns is None or end_event._ns is None:
            raise RuntimeError("Both events must be recorded before calling elapsed_time()")
        return (end_event._ns - self._ns) / 1e6

    def __repr__(self) -> str:
        return f"torch.neuron.Event(recorded_ns={self._ns})"
