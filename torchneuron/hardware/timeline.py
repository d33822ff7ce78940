"""The simulated clock of one NeuronCore: a host clock and an in-order device queue.

Why two clocks: on the real device the host enqueues work and returns, and the device runs
it later, in order. A kernel cannot start before the host has issued it, nor before the
previous kernel has finished. That asymmetry is what makes eager on small tensors
launch-bound (the device idles waiting for the host) and compiled work device-bound (the
host idles waiting for the device), so both clocks are kept and every gap is counted.

All times are integer nanoseconds since the timeline was created. Nothing here reads the
wall clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from .compile_queue import CompileQueue
from .side_streams import SideStreams

__all__ = ["Timeline", "TimelineEntry", "TimelineObserver"]

TimelineEntry = tuple[str, int, int]  # (label, start_ns, end_ns)
# observer(track, name, start_ns, end_ns, detail): track is "host" (name = the category),
# "device" (detail = a KernelCost or an executable), "wait", or one given to ``emit``.
TimelineObserver = Callable[[str, str, int, int, Any], None]


class Timeline:
    """Host clock + in-order device queue, with a breakdown of where time went.

    - ``host_ns``: the host's simulated time (advanced by ``host`` costs and by waits).
    - ``device_free_ns``: when the device finishes the last enqueued work.
    - ``host_by_category``: host costs by category ("dispatch", "launch", "compile", ...).
    - ``host_wait_ns``: host time spent waiting for the device (synchronize, events).
    - ``device_busy_ns`` / ``device_idle_ns``: device time running work / idle between
      enqueued work items because the host had not issued the next one yet.
    """

    def __init__(self, trace_limit: int = 0) -> None:
        self.host_ns = 0
        self.device_free_ns = 0
        self.host_by_category: dict[str, int] = {}
        self.host_wait_ns = 0
        self.device_busy_ns = 0
        self.device_idle_ns = 0
        self.enqueued = 0
        self.compiler: CompileQueue | None = None  # the simulated background compiler
        self.trace: deque[TimelineEntry] = deque(maxlen=max(0, trace_limit))
        # Observers (torchneuron.profiler) see every interval; they never change time.
        self.observers: list[TimelineObserver] = []
        # the stream whose work is being issued (0: the default stream; the device layer's
        # ``torch.neuron.stream`` sets it) and, once a side stream was used, its rules
        self.stream = 0
        self.side: SideStreams | None = None
        # a pending wait of the compute queue (``device_wait``): (free before, until,
        # callback told the part that delays the next work), settled by the next work
        self._gate: tuple[int, int, Callable[[int], None]] | None = None
        self._slow = False  # side streams in use or a wait pending: ``_enqueue_slow``

    def host(self, ns: int, category: str) -> int:
        """Charge ``ns`` of host-side cost under ``category``; return the new host time."""
        ns = int(ns)
        if ns < 0:
            raise ValueError(f"host cost must be >= 0 ns, got {ns}")
        self.host_ns += ns
        self.host_by_category[category] = self.host_by_category.get(category, 0) + ns
        if self.observers:
            self.emit("host", category, self.host_ns - ns, self.host_ns)
        return self.host_ns

    def enqueue(self, device_ns: int, label: str = "", detail: Any = None) -> tuple[int, int]:
        """Issue ``device_ns`` of device work now; return its (start, end) on the device.

        The host does not wait: it continues at ``host_ns``. The work starts when both the
        host has issued it and the device has finished everything before it.
        """
        device_ns = int(device_ns)
        if device_ns < 0:
            raise ValueError(f"device time must be >= 0 ns, got {device_ns}")
        if self._slow:
            return self._enqueue_slow(device_ns, label, detail)
        # (conditional, not ``max``: this runs once per eager op)
        start = self.host_ns if self.host_ns > self.device_free_ns else self.device_free_ns
        if self.enqueued and start > self.device_free_ns:
            self.device_idle_ns += start - self.device_free_ns
        end = start + device_ns
        self.device_free_ns = end
        self.device_busy_ns += device_ns
        self.enqueued += 1
        if self.trace.maxlen:
            self.trace.append((label, start, end))
        if self.observers:
            self.emit("device", label, start, end, detail)
        return start, end

    def _enqueue_slow(self, device_ns: int, label: str, detail: Any) -> tuple[int, int]:
        """``enqueue`` with a wait pending or side streams in use (``side_streams``)."""
        side = self.side
        if side is not None and self.stream:
            start, end = side.place(self, self.stream, device_ns, detail)
        else:
            self._settle(self.host_ns)
            start = self.host_ns if self.host_ns > self.device_free_ns else self.device_free_ns
            pushed = 0
            if side is not None and side.reserved:
                start, pushed = side.admit(start, device_ns)
            if self.enqueued and start > self.device_free_ns:
                self.device_idle_ns += start - self.device_free_ns
            end = start + device_ns + pushed
            self.device_free_ns = end
            if side is not None:
                side.note(start, end)
        self.device_busy_ns += device_ns
        self.enqueued += 1
        if self.trace.maxlen:
            self.trace.append((label, start, end))
        if self.observers:
            self.emit("device", label, start, end, detail)
        return start, end

    def set_stream(self, stream_id: int) -> None:
        """Work issued from now on belongs to stream ``stream_id`` (0: the default one)."""
        self.stream = int(stream_id)
        if self.stream:
            self.side_streams()

    def side_streams(self) -> SideStreams:
        """The side streams' rules, from the first use of a side stream on."""
        if self.side is None:
            self.side = SideStreams(self.device_free_ns)
            self._slow = True
        return self.side

    def stream_ready_ns(self, stream_id: int) -> int:
        """When stream ``stream_id``'s work issued so far is done on the device."""
        if stream_id and self.side is not None:
            return self.side.ready(stream_id)
        return 0 if stream_id else self.device_free_ns

    def _settle(self, issue_ns: int) -> None:
        """Settle a pending wait: work issued (or a host looking) at ``issue_ns`` would
        have started at ``max(issue_ns, free before)``; the wait delayed it by what its
        end lies past that, and only that is reported to the wait's callback."""
        gate = self._gate
        if gate is not None:
            before, until, on_delay = gate
            self._gate = None
            self._slow = self.side is not None
            delay = until - (issue_ns if issue_ns > before else before)
            if delay > 0:
                on_delay(delay)

    def launch(
        self, dispatch_ns: int, launch_ns: int, device_ns: int, label: str = "", detail: Any = None
    ) -> tuple[int, int]:
        """``host(dispatch_ns, "dispatch")``, ``host(launch_ns, "launch")``, then
        ``enqueue(device_ns, label, detail)``: one eager kernel, in one call.

        Why: every eager op on the device does exactly this; three calls were a visible
        part of its wall time. With observers the three calls run (they see each interval).
        """
        dispatch_ns, launch_ns = int(dispatch_ns), int(launch_ns)
        if self.observers or dispatch_ns < 0 or launch_ns < 0:
            self.host(dispatch_ns, "dispatch")
            self.host(launch_ns, "launch")
            return self.enqueue(device_ns, label, detail)
        self.host_ns += dispatch_ns + launch_ns
        cats = self.host_by_category
        cats["dispatch"] = cats.get("dispatch", 0) + dispatch_ns
        cats["launch"] = cats.get("launch", 0) + launch_ns
        return self.enqueue(device_ns, label, detail)

    def issue(self, launch_ns: int, device_ns: int, label: str = "", detail: Any = None
              ) -> tuple[int, int]:
        """``host(launch_ns, "launch")``, then ``enqueue(device_ns, label, detail)``: one
        kernel of a recorded batch (``NeuronCore.issue_recorded``), in fewer calls, as
        ``launch`` is one eager kernel's. With observers the two calls run."""
        launch_ns = int(launch_ns)
        if self.observers or launch_ns < 0:
            self.host(launch_ns, "launch")
            return self.enqueue(device_ns, label, detail)
        self.host_ns += launch_ns
        cats = self.host_by_category
        cats["launch"] = cats.get("launch", 0) + launch_ns
        return self.enqueue(device_ns, label, detail)

    def submit_compile(self, latency_ns: int, priority: float = 0.0, workers: int = 1) -> int:
        """Queue a background compile of modeled ``latency_ns`` now on the simulated
        compiler (``compile_queue``: ``workers`` at once, highest ``priority`` first);
        return its job id for ``compile_done_at``. The host does not wait: this is how
        adaptive eager decides, on the simulated clock, when a region's executable may
        be swapped in."""
        if self.compiler is None:  # (its worker count is fixed by the first submission)
            self.compiler = CompileQueue(workers, self._compile_started)
        return self.compiler.submit(self.host_ns, latency_ns, priority)

    def compile_done_at(self, job: int) -> int | None:
        """When compile ``job`` finishes, once the host has reached its start; else None."""
        assert self.compiler is not None, "no compile was submitted"
        return self.compiler.done_at(job, self.host_ns)

    @property
    def compiler_busy_ns(self) -> int:
        """Modeled compile latency of the compiles started so far."""
        return 0 if self.compiler is None else self.compiler.busy_ns

    @property
    def compiler_free_ns(self) -> int:
        """When the compiles started so far are done."""
        return 0 if self.compiler is None else self.compiler.free_ns

    def _compile_started(self, start: int, end: int) -> None:
        if self.observers:
            self.emit("compiler", "compile", start, end)

    def record_event(self) -> int:
        """Timestamp at which all work enqueued so far has completed."""
        if self._gate is not None:
            self._settle(self.host_ns)
        return max(self.host_ns, self.device_free_ns)

    def wait_event(self, t: int) -> int:
        """Host blocks until time ``t`` (an event's timestamp); return the new host time."""
        if self._gate is not None:
            self._settle(self.host_ns)
        t = int(t)
        if t > self.host_ns:
            self.host_wait_ns += t - self.host_ns
            if self.observers:
                self.emit("wait", "wait", self.host_ns, t)
            self.host_ns = t
        return self.host_ns

    def device_wait(self, t: int, on_delay: Callable[[int], None] | None = None) -> int:
        """Later device work waits until ``t`` (another queue's event, e.g. a collective's
        end: ``Work.wait()`` makes the compute queue wait as a CUDA stream waits); the
        host does not block. Returns when the device queue is free.

        ``on_delay(ns)``: told, when the next work is issued (or the host looks at the
        device), by how much the wait delayed it. Why then and not now: a wait the host
        issues work after anyway (it is still dispatching the next ops when the
        collective ends) delays nothing, though the queue had nothing left to hide it."""
        t = int(t)
        if t > self.device_free_ns:
            if on_delay is not None:
                gate = self._gate
                before = self.device_free_ns if gate is None else gate[0]
                self._gate = (before, t if gate is None else max(t, gate[1]), on_delay)
                self._slow = True
            self.device_free_ns = t
        return self.device_free_ns

    def synchronize(self) -> int:
        """Host blocks until the device is idle; return the new host time."""
        return self.wait_event(self.device_free_ns)

    def emit(self, track: str, name: str, start_ns: int, end_ns: int, detail: Any = None) -> None:
        """Tell observers of an interval on ``track`` (layers above use it for the compiler
        queue, region recording and replay, side exits as ``start_ns == end_ns``)."""
        for observer in list(self.observers):
            observer(track, name, int(start_ns), int(end_ns), detail)

    @property
    def now(self) -> int:
        """The host's current simulated time (what the user's program observes)."""
        return self.host_ns

    def breakdown(self) -> dict[str, object]:
        """A snapshot of the counters (plain data, safe to keep)."""
        return {
            "host_ns": self.host_ns,
            "host_ns_by_category": dict(sorted(self.host_by_category.items())),
            "host_wait_ns": self.host_wait_ns,
            "device_free_ns": self.device_free_ns,
            "device_busy_ns": self.device_busy_ns,
            "device_idle_ns": self.device_idle_ns,
            "enqueued": self.enqueued,
        }

    def __repr__(self) -> str:
        return (
            f"Timeline(host_ns={self.host_ns}, device_free_ns={self.device_free_ns}, "
            f"busy={self.device_busy_ns}, idle={self.device_idle_ns})"
        )
