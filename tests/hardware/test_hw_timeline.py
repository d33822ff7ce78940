"""Host/device clocks: async enqueue, in-order device, synchronize and events."""

from __future__ import annotations

import pytest

from torchneuron.hardware import Timeline


def test_enqueue_is_asynchronous_and_in_order() -> None:
    tl = Timeline()
    tl.host(100, "dispatch")
    assert tl.enqueue(1_000, "a") == (100, 1_100)
    assert tl.host_ns == 100  # the host did not wait
    tl.host(50, "dispatch")
    assert tl.enqueue(10, "b") == (1_100, 1_110)  # waits for the device, not the host
    tl.host(5_000, "dispatch")
    assert tl.enqueue(10, "c") == (5_150, 5_160)  # waits for the host: device idled
    assert tl.device_busy_ns == 1_020
    assert tl.device_idle_ns == 5_150 - 1_110
    assert tl.host_by_category == {"dispatch": 5_150}


def test_synchronize_and_events() -> None:
    tl = Timeline()
    tl.enqueue(1_000)
    ev = tl.record_event()
    assert ev == 1_000 and tl.host_ns == 0
    tl.host(200, "launch")
    tl.wait_event(ev)
    assert tl.host_ns == 1_000 and tl.host_wait_ns == 800
    tl.wait_event(10)  # an event in the past does not move the host back
    assert tl.host_ns == 1_000
    tl.enqueue(500)
    assert tl.synchronize() == 1_500
    assert tl.record_event() == 1_500


def test_negative_costs_rejected_and_trace_bounded() -> None:
    tl = Timeline(trace_limit=2)
    with pytest.raises(ValueError):
        tl.host(-1, "dispatch")
    with pytest.raises(ValueError):
        tl.enqueue(-1)
    for i in range(3):
        tl.enqueue(1, f"k{i}")
    assert [label for label, _, _ in tl.trace] == ["k1", "k2"]


def test_background_compiles_run_on_as_many_workers_as_given() -> None:
    """``workers`` compiles at once (the profile's ``compile_parallelism``): the next
    waits for the earliest free worker; one worker is a queue."""
    one, three = Timeline(), Timeline()
    jobs = [one.submit_compile(100) for _ in range(3)]
    one.host(300, "test")
    assert [one.compile_done_at(j) for j in jobs] == [100, 200, 300]
    jobs = [three.submit_compile(100, workers=3) for _ in range(4)]
    three.host(100, "test")
    assert [three.compile_done_at(j) for j in jobs] == [100, 100, 100, 200]
    assert three.compiler_free_ns == 200 and three.compiler_busy_ns == 400


def test_a_free_worker_takes_the_highest_priority_compile_submitted_by_then() -> None:
    tl = Timeline()
    a = tl.submit_compile(100, priority=1.0)  # starts at once: the worker is free
    b = tl.submit_compile(100, priority=1.0)
    tl.host(50, "test")
    c = tl.submit_compile(100, priority=5.0)  # later, but outranks b at time 100
    assert tl.compile_done_at(a) == 100
    assert tl.compile_done_at(b) is None  # not decided before the host reaches its start
    tl.host(50, "test")
    assert tl.compile_done_at(c) == 200
    assert tl.compile_done_at(b) is None
    tl.host(100, "test")
    assert tl.compile_done_at(b) == 300


@pytest.mark.parametrize("observed", [False, True])
def test_issue_is_a_host_launch_then_an_enqueue(observed: bool) -> None:
    """``issue`` (a kernel of a recorded batch, in one call) charges and enqueues exactly
    as ``host(ns, "launch")`` then ``enqueue``; observers see the same intervals."""
    seen: dict[str, list] = {"issue": [], "calls": []}
    timelines = {"issue": Timeline(), "calls": Timeline()}
    for name, tl in timelines.items():
        tl.host(300, "guard")
        tl.enqueue(5_000, "before")
        if observed:
            tl.observers.append(lambda *a, name=name: seen[name].append(a))
    got = [timelines["issue"].issue(2_000, 700, "k", "detail") for _ in range(3)]
    tl = timelines["calls"]
    want = []
    for _ in range(3):
        tl.host(2_000, "launch")
        want.append(tl.enqueue(700, "k", "detail"))
    assert got == want
    a, b = timelines["issue"], timelines["calls"]
    assert (a.host_ns, a.device_free_ns, a.host_by_category, a.device_busy_ns, a.device_idle_ns,
            a.enqueued) == (b.host_ns, b.device_free_ns, b.host_by_category, b.device_busy_ns,
                            b.device_idle_ns, b.enqueued)
    assert seen["issue"] == seen["calls"]
