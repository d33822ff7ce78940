"""Recorded timeline events -> Chrome trace-event JSON (Perfetto, chrome://tracing).

Layout: one process per device ("neuron:0 (simulated)"); threads in a fixed order: the
host (its costs by category, and its waits for the device), the device queue (one slice
per eager kernel or executable launch), then one thread per engine (TensorE, VectorE,
ScalarE, GpSimd, DMA), then any track reported by a layer above, in order of first
appearance (the compiler queue, adaptive eager's regions). Times are the simulated
nanoseconds as microseconds (the format's unit), so the file is the same on every run.

Engine slices come from the cost model's own numbers: an eager kernel's
``KernelCost.engine_ns`` (engines overlap, each starting after the fixed DMA latency),
and for an executable each scheduled kernel's ``start_ns`` and ``cost.engine_ns`` from the
neuron compiler's schedule, offset by the launch's start on the device.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torchneuron.hardware import ENGINES

__all__ = ["ENGINE_TRACKS", "to_chrome_trace"]

ENGINE_TRACKS: dict[str, str] = {
    "tensor": "TensorE",
    "vector": "VectorE",
    "scalar": "ScalarE",
    "gpsimd": "GpSimd",
    "dma": "DMA",
}
_HOST_TID = 1
_QUEUE_TID = 2
_ENGINE_TID = {e: 3 + i for i, e in enumerate(ENGINES)}
_FIRST_OTHER_TID = 3 + len(ENGINES)


def _us(ns: int) -> float:
    return ns / 1000.0


def _slice(name: str, cat: str, pid: int, tid: int, start: int, end: int,
           args: dict[str, Any] | None = None) -> dict[str, Any]:
    if end <= start:
        ev: dict[str, Any] = {"name": name, "cat": cat, "ph": "i", "s": "t", "ts": _us(start),
                              "pid": pid, "tid": tid}
    else:
        ev = {"name": name, "cat": cat, "ph": "X", "ts": _us(start), "dur": _us(end - start),
              "pid": pid, "tid": tid}
    if args:
        ev["args"] = args
    return ev


def _engine_slices(name: str, pid: int, start: int, end: int, engine_ns: dict[str, int],
                   fixed_ns: int) -> list[dict[str, Any]]:
    out = []
    for engine in ENGINES:
        ns = int(engine_ns.get(engine, 0))
        if ns <= 0:
            continue
        s = start + int(fixed_ns)
        out.append(_slice(name, "engine", pid, _ENGINE_TID[engine], s, min(end, s + ns)))
    return out


def _device_events(ev: Any, pid: int) -> list[dict[str, Any]]:
    exe = ev.executable
    if exe is not None:
        kernels = exe.program.get("kernels", [])
        roofline = int(getattr(exe, "roofline_ns", 0))
        out = [_slice(ev.name, "executable", pid, _QUEUE_TID, ev.start_ns, ev.end_ns,
                      {"kernels": len(kernels), "roofline_ns": roofline,
                       "target": getattr(exe, "target", "")})]
        for k in kernels:
            cost = k.get("cost", {})
            ks = ev.start_ns + int(k.get("start_ns", 0))
            ke = ev.start_ns + int(k.get("end_ns", 0))
            out += _engine_slices(f"{ev.name}:{k.get('name', '?')}", pid, ks, ke,
                                  cost.get("engine_ns", {}), cost.get("fixed_ns", 0))
        return out
    cost = ev.detail
    if cost is None or not hasattr(cost, "engine_ns"):
        return [_slice(ev.name, "kernel", pid, _QUEUE_TID, ev.start_ns, ev.end_ns)]
    args = {"bound": cost.bound, "roofline_ns": cost.roofline_ns, "fixed_ns": cost.fixed_ns,
            **{f"{e}_ns": int(cost.engine_ns.get(e, 0)) for e in ENGINES}}
    out = [_slice(ev.name, "kernel", pid, _QUEUE_TID, ev.start_ns, ev.end_ns, args)]
    return out + _engine_slices(ev.name, pid, ev.start_ns, ev.end_ns, cost.engine_ns,
                                cost.fixed_ns)


def _plain_args(detail: Any) -> dict[str, Any] | None:
    if isinstance(detail, dict):
        return {str(k): v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
                for k, v in detail.items()}
    return None if detail is None else {"detail": str(detail)}


def to_chrome_trace(events: Iterable[Any]) -> dict[str, Any]:
    """Chrome trace-event document of ``events`` (``TraceEvent``s), ready for ``json.dump``."""
    trace: list[dict[str, Any]] = []
    other_tids: dict[tuple[int, str], int] = {}
    pids: set[int] = set()
    for ev in events:
        pid = ev.device
        pids.add(pid)
        if ev.track == "host":
            trace.append(_slice(ev.name, "host", pid, _HOST_TID, ev.start_ns, ev.end_ns))
        elif ev.track == "wait":
            trace.append(_slice("wait for device", "wait", pid, _HOST_TID, ev.start_ns,
                                ev.end_ns))
        elif ev.track == "device":
            trace += _device_events(ev, pid)
        else:
            key = (pid, ev.track)
            if key not in other_tids:
                other_tids[key] = _FIRST_OTHER_TID + sum(1 for p, _ in other_tids if p == pid)
            trace.append(_slice(ev.name, ev.track, pid, other_tids[key], ev.start_ns,
                                ev.end_ns, _plain_args(ev.detail)))
    meta: list[dict[str, Any]] = []
    for pid in sorted(pids):
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                     "args": {"name": f"neuron:{pid} (simulated)"}})
        threads = {_HOST_TID: "host", _QUEUE_TID: "device queue"}
        threads.update({_ENGINE_TID[e]: ENGINE_TRACKS[e] for e in ENGINES})
        threads.update({tid: track for (p, track), tid in other_tids.items() if p == pid})
        for tid, name in sorted(threads.items()):
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                         "args": {"name": name}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                         "args": {"sort_index": tid}})
    return {"traceEvents": meta + trace, "displayTimeUnit": "ns",
            "otherData": {"clock": "simulated NeuronCore time (deterministic)"}}
