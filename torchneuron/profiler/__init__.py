"""``torchneuron.profiler``: the simulated timeline of your own code, as a Chrome trace.

In the manner of ``torch.profiler.profile(...).export_chrome_trace``::

    with torchneuron.profiler.profile() as prof:
        train_step()
    prof.export_chrome_trace("trace.json")   # open in Perfetto or chrome://tracing
    print(prof.summary())

The trace shows, on the **simulated** clock (integer ns, identical on every run), the
host's costs by category (dispatch, launch, guard, compile, ...), host waits, the device
queue (eager kernels and executable launches), each kernel on its engines (TensorE,
VectorE, ScalarE, GpSimd, DMA; from the cost model's per-engine times), and any track a
layer above reports through ``Timeline.emit`` (the compiler queue, region recording and
replay, side exits). Profiling observes the timeline; it never changes simulated time.
"""

from torchneuron.profiler._collector import TraceEvent, profile
from torchneuron.profiler.chrome import ENGINE_TRACKS, to_chrome_trace

__all__ = ["ENGINE_TRACKS", "TraceEvent", "profile", "to_chrome_trace"]
