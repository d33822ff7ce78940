"""``torch.neuron`` streams, mirroring ``torch.cuda.Stream`` / ``current_stream`` / ``stream``.

Why streams at all: code written for CUDA creates side streams, makes one wait for
another and runs work under ``with torch.cuda.stream(s):``; ported to ``neuron`` it
must run unchanged, and FSDP2 relies on its side streams to overlap its collectives with
compute. A NeuronCore has one set of compute engines, so streams do not add compute
throughput: every kernel, whatever its stream, takes its time on the one compute queue.
What a stream changes is *when* its work may run: only after that stream's earlier work
and what it waited for (``wait_stream``, ``wait_event``, a collective's ``Work.wait``),
not after everything issued before it. The timeline places a side stream's kernels by
those dependencies, at kernel boundaries, and delays the default stream's later work by
their duration (``hardware.side_streams``); a collective issued under a side stream
starts when that stream's inputs are ready (``distributed.clock.arrival_ns``), so
FSDP2's all-gather of the next layer overlaps the current layer's compute, as on CUDA.
A collective waited for under a side stream delays the compute queue only where the
default stream waits for that stream or an event recorded on it.
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
        end = core.timeline.stream_ready_ns(self.stream_id)
        q = peek_collective_queue(core)
        if q is not None:
            end = max(end, q.pending_ns(self.stream_id))
        if end:
            core.wait_event(end)

    def wait_event(self, event: Any) -> None:
        """Later work waits for ``event``: for the work its stream had issued when it was
        recorded, and for the collectives that stream waited for (``_wait``)."""
        self._wait(getattr(event, "_pending_ns", 0), getattr(event, "_ready_ns", 0))

    def wait_stream(self, stream: Stream) -> None:
        """Later work waits for the work ``stream`` has issued so far and the
        collectives it waits for (``_wait``)."""
        core = get_core(self.device_index)
        q = peek_collective_queue(core)
        pending = q.pending_ns(stream.stream_id) if q is not None else 0
        self._wait(pending, core.timeline.stream_ready_ns(stream.stream_id))

    def _wait(self, collective_ns: int, ready_ns: int = 0) -> None:
        """This stream waits for a collective ending at ``collective_ns`` and for device
        work ending at ``ready_ns`` (0: none). The default stream: the compute queue
        waits (a wait that delays its next work is counted as exposed collective time);
        a side stream's later work starts after both, and a collective is passed on to
        those that wait for it."""
        core = get_core(self.device_index)
        tl = core.timeline
        if self.stream_id:
            if ready_ns:
                tl.side_streams().wait(self.stream_id, ready_ns)
            if collective_ns:
                collective_queue(core).wait_on(tl, self.stream_id, collective_ns)
            return
        end = max(collective_ns, ready_ns)
        if end > tl.device_free_ns:
            # a side stream's work past the compute queue waits for a collective itself
            collective_queue(core).wait_on(tl, 0, end)

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
        get_core(s.device_index).timeline.set_stream(s.stream_id)


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
        self._ready_ns = 0  # its stream's work issued before it ends then (device side)

    def record(self, stream: Any = None) -> None:
        self._index = current_device() if stream is None else stream.device_index
        core = get_core(self._index)
        core.notify_sync("event")
        sid = current_stream(self._index).stream_id if stream is None else stream.stream_id
        tl = core.timeline
        if sid:  # a side stream's event marks that stream's work, not the whole queue
            self._ready_ns = tl.stream_ready_ns(sid)
            self._ns = max(tl.host_ns, self._ready_ns)
        else:
            self._ns = core.record_event()
            self._ready_ns = tl.device_free_ns
        q = peek_collective_queue(core)
        if q is not None:
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
        """Device-side wait: ``stream`` (default: the current one) waits for the work and
        the collectives the event marks (``Stream.wait_event``)."""
        if self._pending_ns or self._ready_ns:
            (stream if stream is not None else current_stream(self._index)).wait_event(self)

    def elapsed_time(self, end_event: Event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Events must be created with enable_timing=True to measure time")
        if self._ns is None or end_event._ns is None:
            raise RuntimeError("Both events must be recorded before calling elapsed_time()")
        return (end_event._ns - self._ns) / 1e6

    def __repr__(self) -> str:
        return f"torch.neuron.Event(recorded_ns={self._ns})"
