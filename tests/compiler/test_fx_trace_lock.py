"""Two traces on two threads (a region compiling in adaptive eager's background thread
and one on the main thread) must not interleave FX's process-wide tracing flag: before
``fx_trace.TRACE_LOCK``, the flag could stay set after both were done, and every later
``torch.compile`` in the process failed ("Detected that you are using FX to symbolically
trace a dynamo-optimized function"), 212 tests of one CI run among them."""

from __future__ import annotations

import threading

import torch
import torch.fx._symbolic_trace as fx_symbolic_trace

from torchneuron.compiler.prepare.graph import prepare


def test_overlapping_prepares_leave_fx_tracing_flag_clear() -> None:
    inside, release, done = threading.Event(), threading.Event(), threading.Event()

    def background_fn(x: torch.Tensor) -> torch.Tensor:
        inside.set()
        release.wait(2)
        return x + 1

    def main_fn(x: torch.Tensor) -> torch.Tensor:
        release.set()
        done.wait(2)  # the old order: the background trace ends inside this one
        return x * 2

    def background() -> None:
        prepare(background_fn, [torch.ones(3)])
        done.set()

    t = threading.Thread(target=background)
    t.start()
    assert inside.wait(10)
    timer = threading.Timer(0.2, release.set)  # with the lock, main waits for background
    timer.start()
    prepare(main_fn, [torch.ones(3)])
    t.join(10)
    timer.cancel()
    assert not fx_symbolic_trace.is_fx_tracing()
    x = torch.randn(4, device="neuron")
    torch.testing.assert_close(torch.compile(torch.sin, backend="neuron")(x).cpu(),
                               torch.sin(x.cpu()))
