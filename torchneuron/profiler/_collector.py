"""The ``profile`` context manager: observes simulated timelines and keeps their intervals.

Why an observer on the timeline rather than hooks in each layer: every host cost, wait
and device item already passes through ``Timeline`` with its simulated interval, so one
observer sees eager ops, executables and whatever the layers above report through
``Timeline.emit`` (the compiler queue, adaptive eager's regions), and nothing has to be
estimated for the trace. The observer only appends to a list: simulated time is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchneuron.hardware import get_core

__all__ = ["TraceEvent", "profile"]


@dataclass(frozen=True)
class TraceEvent:
    """One interval of the simulated timeline of device ``device``.

    ``track``: "host", "wait", "device", or a track named by a layer above ("compiler",
    "adaptive", ...). ``detail``: for "device" items, the eager kernel's ``KernelCost`` or
    the executable that ran (anything with ``program`` and ``device_ns``).
    """

    device: int
    track: str
    name: str
    start_ns: int
    end_ns: int
    detail: Any = None

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def executable(self) -> Any:
        """The executable this device item ran, or None for an eager kernel."""
        d = self.detail
        return d if self.track == "device" and hasattr(d, "program") else None


class profile:  # noqa: N801 (named like torch.profiler.profile)
    """Record the simulated timeline of ``devices`` (default: device 0) while active."""

    def __init__(self, devices: Iterable[int] | None = None) -> None:
        self.devices = list(devices) if devices is not None else [0]
        self.events: list[TraceEvent] = []
        self.start_ns: dict[int, int] = {}
        self.end_ns: dict[int, int] = {}
        self._attached: list[tuple[int, Any, Any]] = []

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Begin observing (``__enter__`` calls this)."""
        if self._attached:
            raise RuntimeError("this torchneuron.profiler.profile is already recording")
        for index in self.devices:
            timeline = get_core(index).timeline
            observer = self._observer(index)
            timeline.observers.append(observer)
            self._attached.append((index, timeline, observer))
            self.start_ns[index] = timeline.now

    def stop(self) -> None:
        """Stop observing (``__exit__`` calls this; a second call does nothing); the events
        are kept."""
        for index, timeline, observer in self._attached:
            if observer in timeline.observers:
                timeline.observers.remove(observer)
            self.end_ns[index] = max(timeline.now, timeline.device_free_ns)
        self._attached.clear()

    def _observer(self, index: int) -> Any:
        append = self.events.append

        def observe(track: str, name: str, start: int, end: int, detail: Any) -> None:
            append(TraceEvent(index, track, name, start, end, detail))

        return observe

    # --- results ---------------------------------------------------------------------------
    def executables(self) -> dict[str, dict[str, int]]:
        """Executables launched while recording: launches, device ns and roofline ns in total."""
        out: dict[str, dict[str, int]] = {}
        for ev in self.events:
            exe = ev.executable
            if exe is None:
                continue
            row = out.setdefault(ev.name, {"launches": 0, "device_ns": 0, "roofline_ns": 0})
            row["launches"] += 1
            row["device_ns"] += ev.duration_ns
            row["roofline_ns"] += int(getattr(exe, "roofline_ns", 0))
        return dict(sorted(out.items()))

    def totals(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(track, name) -> (count, total ns), sorted by track then name."""
        acc: dict[tuple[str, str], list[int]] = {}
        for ev in self.events:
            row = acc.setdefault((ev.track, ev.name), [0, 0])
            row[0] += 1
            row[1] += ev.duration_ns
        return {k: (v[0], v[1]) for k, v in sorted(acc.items())}

    def summary(self, limit: int = 20) -> str:
        """A table of the busiest (track, name) pairs by simulated time."""
        rows = sorted(self.totals().items(), key=lambda kv: (-kv[1][1], kv[0]))[:limit]
        lines = [f"{'track':<10} {'name':<40} {'count':>7} {'total us':>12}"]
        for (track, name), (count, ns) in rows:
            lines.append(f"{track:<10} {name[:40]:<40} {count:>7} {ns / 1e3:>12.3f}")
        return "\n".join(lines)

    def to_chrome_trace(self) -> dict[str, Any]:
        """The recorded events as a Chrome trace-event document (a JSON-ready dict)."""
        from torchneuron.profiler.chrome import to_chrome_trace

        return to_chrome_trace(self.events)

    def export_chrome_trace(self, path: str | Path) -> Path:
        """Write the trace as JSON (opens in Perfetto and chrome://tracing)."""
        import json

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_chrome_trace(), separators=(",", ":")))
        return path
