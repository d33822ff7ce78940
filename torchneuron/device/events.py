"""``torch.neuron.Event``: a marker in a device's work queue, timed on the simulated clock."""

from __future__ import annotations

from typing import Any

from torchneuron.device.current import current_device
from torchneuron.hardware import get_core

__all__ = ["Event"]


class Event:
    """A marker in the device's work queue; ``elapsed_time`` is simulated milliseconds."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False) -> None:
        self.enable_timing = enable_timing
        self._ns: int | None = None
        self._index: int | None = None

    def record(self, stream: Any = None) -> None:
        self._index = current_device()
        core = get_core(self._index)
        core.notify_sync("event")
        self._ns = core.record_event()

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
        """Device-side wait: work is in order on our single queue, so nothing to do."""

    def elapsed_time(self, end_event: Event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Events must be created with enable_timing=True to measure time")
        if self._ns is None or end_event._ns is None:
            raise RuntimeError("Both events must be recorded before calling elapsed_time()")
        return (end_event._ns - self._ns) / 1e6

    def __repr__(self) -> str:
        return f"torch.neuron.Event(recorded_ns={self._ns})"
