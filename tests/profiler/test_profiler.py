"""``torchneuron.profiler``: a valid Chrome trace of the simulated timeline, on the engines,
that never changes simulated time and is the same on every run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from torchneuron.hardware import get_core
from torchneuron.hardware import reset as reset_cores
from torchneuron.profiler import ENGINE_TRACKS, profile


def _step(seed: int = 0) -> float:
    """One small training step on neuron:0; its simulated ms (events)."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 10)).to("neuron")
    x = torch.randn(16, 32, device="neuron")
    y = torch.randint(0, 10, (16,), device="neuron")
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    F.cross_entropy(model(x), y).backward()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def _profiled_step() -> tuple[profile, dict, dict, float]:
    reset_cores()
    before = get_core(0).stats()
    with profile() as prof:
        ms = _step()
    return prof, before, get_core(0).stats(), ms


def _threads(trace: dict) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def _check_trace_events(trace: dict) -> None:
    """The trace-event format: metadata, complete ('X') and instant ('i') events."""
    assert isinstance(trace["traceEvents"], list)
    json.dumps(trace)  # JSON-serializable
    for e in trace["traceEvents"]:
        assert e["ph"] in ("M", "X", "i") and isinstance(e["pid"], int)
        assert isinstance(e["tid"], int) and isinstance(e["name"], str)
        if e["ph"] != "M":
            assert isinstance(e["ts"], float) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] > 0


def test_eager_trace_is_valid_and_on_the_engines(tmp_path: Path) -> None:
    prof, before, after, _ = _profiled_step()
    path = prof.export_chrome_trace(tmp_path / "t.json")
    trace = json.loads(path.read_text())
    _check_trace_events(trace)
    threads = _threads(trace)
    assert {"host", "device queue", *ENGINE_TRACKS.values()} <= set(threads.values())
    by_thread: dict[str, list] = {}
    for e in trace["traceEvents"]:
        if e["ph"] != "M":
            by_thread.setdefault(threads[e["tid"]], []).append(e)
    for engine in ("TensorE", "VectorE", "DMA"):
        assert by_thread[engine], engine
    # one device-queue slice per kernel launched, host slices sum to the host's costs
    launched = after["kernel_launches"] - before["kernel_launches"]
    assert len([e for e in by_thread["device queue"] if e["cat"] == "kernel"]) == launched
    host_ns = sum(v for v in after["host_ns_by_category"].values()) - sum(
        before["host_ns_by_category"].values())
    traced = sum(ev.duration_ns for ev in prof.events if ev.track == "host")
    assert traced == host_ns
    # each engine slice lies inside its kernel's slice
    kernels = [(e["ts"], e["ts"] + e["dur"]) for e in by_thread["device queue"]]
    for e in by_thread["TensorE"]:
        assert any(s <= e["ts"] and e["ts"] + e["dur"] <= t + 1e-9 for s, t in kernels)
    assert "host" in prof.summary() and "dispatch" in prof.summary()


def test_profiling_changes_no_simulated_time_and_repeats_exactly() -> None:
    reset_cores()
    plain = _step()
    plain_ns = get_core(0).timeline.host_ns
    prof1, _, _, ms1 = _profiled_step()
    ns1 = get_core(0).timeline.host_ns
    prof2, _, _, ms2 = _profiled_step()
    assert plain == ms1 == ms2 and plain_ns == ns1
    assert json.dumps(prof1.to_chrome_trace()) == json.dumps(prof2.to_chrome_trace())
    reset_cores()


def test_emitted_tracks_and_instants() -> None:
    reset_cores()
    tl = get_core(0).timeline
    with profile() as prof:
        tl.emit("compiler", "compile region 0", 100, 2_000_100, {"ops": 12})
        tl.emit("adaptive", "side exit", 5_000, 5_000)
    trace = prof.to_chrome_trace()
    _check_trace_events(trace)
    threads = _threads(trace)
    evs = {e["name"]: e for e in trace["traceEvents"] if e["ph"] != "M"}
    assert threads[evs["compile region 0"]["tid"]] == "compiler"
    assert evs["compile region 0"]["dur"] == 2000.0 and evs["compile region 0"]["args"]["ops"] == 12
    assert evs["side exit"]["ph"] == "i" and threads[evs["side exit"]["tid"]] == "adaptive"
    assert not tl.observers  # detached on exit
    with pytest.raises(RuntimeError, match="already recording"):
        prof.start()
        prof.start()
    prof.stop()


def test_compiled_program_on_the_engines_and_its_roofline() -> None:
    reset_cores()

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ b + 1.0).sum(dim=0)

    compiled = torch.compile(f, backend="neuron")
    a = torch.randn(128, 256, device="neuron")
    b = torch.randn(256, 128, device="neuron")
    compiled(a, b)  # compile
    with profile() as prof:
        out = compiled(a, b)
        torch.neuron.synchronize()
    torch.testing.assert_close(out.cpu(), f(a.cpu(), b.cpu()))
    exes = prof.executables()
    assert len(exes) == 1
    (row,) = exes.values()
    assert row["launches"] == 1 and 0 < row["roofline_ns"] <= row["device_ns"]
    trace = prof.to_chrome_trace()
    _check_trace_events(trace)
    threads = _threads(trace)
    launches = [e for e in trace["traceEvents"] if e.get("cat") == "executable"]
    assert len(launches) == 1 and launches[0]["args"]["roofline_ns"] == row["roofline_ns"]
    start, stop = launches[0]["ts"], launches[0]["ts"] + launches[0]["dur"]
    inside = [e for e in trace["traceEvents"] if e.get("cat") == "engine"]
    assert {threads[e["tid"]] for e in inside} >= {"TensorE", "DMA"}
    assert all(start <= e["ts"] and e["ts"] + e["dur"] <= stop + 1e-9 for e in inside)
    reset_cores()


def test_adaptive_replays_on_their_own_track() -> None:
    ae = pytest.importorskip("torchneuron.adaptive_eager")
    from torchneuron.bench import zoo

    reset_cores()
    torch.manual_seed(0)
    task = zoo.get("mlp").build("neuron")
    ae.reset()
    with ae.enabled():
        for i in range(6):
            task.step(i).item()
        with profile() as prof:
            task.step(6).item()
        replays = ae.stats()["replays"]
    ae.reset()
    assert replays > 0
    trace = prof.to_chrome_trace()
    _check_trace_events(trace)
    threads = _threads(trace)
    replayed = [e for e in trace["traceEvents"]
                if e["ph"] != "M" and threads[e["tid"]] == "adaptive"]
    assert replayed and all(e["name"].startswith(("replay ", "side exit ")) for e in replayed)
    assert [e for e in trace["traceEvents"] if e.get("cat") == "executable"]
    reset_cores()
