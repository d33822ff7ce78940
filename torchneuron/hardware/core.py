"""One simulated NeuronCore: runs eager kernels and executables on its timeline.

Why a per-index singleton: PyTorch's ``neuron:N`` names one device for the whole process;
its clock, memory and compiled-kernel cache must be shared by every layer that touches it
(device, dispatch, adaptive eager, compiled graphs).

The core does not compute numbers (callers do, on CPU tensors); it charges time:

- ``run_eager_kernel``: host dispatch (always); for a kernel, the eager NEFF compile on a
  signature's first use (unless compile latency is zeroed; DMA-only work such as copies and
  host reads is never compiled), the kernel launch on the host, and the kernel's device
  time on the queue.
- ``run_executable``: the executable's launch on the host and its device time on the queue.
- ``issue_recorded``: eager kernels issued as one recorded batch (adaptive eager's first
  tier): one batch launch, then per kernel only ``recorded_kernel_launch_ns`` on the host
  (no dispatch, no launch call: the ops were matched by guards, charged by the caller) and
  the same device time as eager's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import settings, state
from .cost import KernelCost, KernelWork, eager_compile_latency_ns, kernel_cost
from .memory import MemoryTracker
from .profiles import HardwareProfile
from .timeline import Timeline

__all__ = ["NeuronCore", "add_sync_listener", "device_count", "get_core", "remove_sync_listener", "reset"]


class NeuronCore:
    """A physical NeuronCore: profile, timeline, HBM accounting, compiled-signature set."""

    def __init__(self, index: int = 0, profile: HardwareProfile | None = None) -> None:
        self.index = index
        self.profile = profile if profile is not None else settings.current_profile()
        self.timeline = Timeline(trace_limit=int(settings.get_value("timeline_trace")))
        self.memory = MemoryTracker(self.profile.hbm_bytes_per_core, device=f"neuron:{index}")
        self.seen_signatures: set[tuple[str, tuple[Any, ...]]] = set()
        self.ops: Counter[str] = Counter()  # eager ops by name (metadata-only ones included)
        self.kernels = 0  # eager kernels launched
        self.eager_compiles = 0  # new eager signatures (charged or not)
        self.executables: Counter[str] = Counter()  # executable runs by name
        self.executable_kernels = 0  # kernels inside executables run
        self.issuing = False  # inside ``issue_recorded``: kernels charged as a batch
        self.recorded_batches = 0  # batches issued by ``issue_recorded``

    # --- hardware swap -------------------------------------------------------------------
    def set_profile(self, profile: HardwareProfile) -> None:
        """Switch to ``profile``: capacity follows it; compiled eager kernels are forgotten
        (a NEFF targets one chip); the timeline and counters are kept."""
        self.profile = profile
        self.memory.capacity = profile.hbm_bytes_per_core
        self.seen_signatures.clear()

    # --- work ------------------------------------------------------------------------------
    def run_eager_kernel(
        self,
        name: str,
        signature: tuple[Any, ...],
        work: KernelWork | None,
        cost: KernelCost | None = None,
        key: tuple | None = None,
    ) -> KernelCost | None:
        """Charge one eager op. ``work is None`` means metadata only: dispatch cost, no kernel.

        ``cost``: ``kernel_cost(work, self.profile)`` if the caller already has it (eager
        dispatch caches it per signature); computed here otherwise. ``key``: the
        compiled-signature key ``(name, tuple(signature))`` if the caller keeps one
        (eager dispatch keeps one that hashes once).
        Returns the kernel's cost (None for metadata-only ops).
        """
        p = self.profile
        tl = self.timeline
        self.ops[name] += 1
        if self.issuing:  # a kernel of a recorded batch
            if work is None:  # metadata only: the guard that matched it was its host cost
                return None
            if key is None:
                key = (name, tuple(signature))
            if cost is None:
                cost = kernel_cost(work, p)
            if key in self.seen_signatures or not _computes(work):  # (the common case)
                self.kernels += 1
                tl.issue(p.recorded_kernel_launch_ns, cost.total_ns, name, cost)
                return cost
            return self._issue_compiled(name, work, cost, key)
        if work is None:
            tl.host(p.host_dispatch_ns, "dispatch")
            return None
        if key is None:
            key = (name, tuple(signature))
        if cost is None:
            cost = kernel_cost(work, p)
        self.kernels += 1
        if key in self.seen_signatures or not _computes(work):
            tl.launch(p.host_dispatch_ns, p.kernel_launch_ns, cost.total_ns, name, cost)
            return cost
        tl.host(p.host_dispatch_ns, "dispatch")
        self.seen_signatures.add(key)
        self.eager_compiles += 1
        compile_ns = eager_compile_latency_ns(p, settings.compile_latency_enabled())
        if compile_ns:
            tl.host(compile_ns, "compile")
        tl.host(p.kernel_launch_ns, "launch")
        tl.enqueue(cost.total_ns, name, detail=cost)
        return cost

    @contextmanager
    def issue_recorded(self) -> Iterator[None]:
        """Charge the eager kernels run inside as one recorded batch: one
        ``recorded_batch_launch_ns``, then ``recorded_kernel_launch_ns`` per kernel."""
        if self.issuing:  # nested: part of the batch already open
            yield
            return
        self.timeline.host(self.profile.recorded_batch_launch_ns, "launch")
        self.recorded_batches += 1
        self.issuing = True
        try:
            yield
        finally:
            self.issuing = False

    def _issue_compiled(self, name: str, work: KernelWork, cost: KernelCost, key: tuple
                        ) -> KernelCost:  # fmt: skip
        """A kernel of a recorded batch whose signature this core has not compiled: it
        was recorded eagerly before, so normally it was; not after a profile swap. Its
        compile, then its launch."""
        p = self.profile
        self.kernels += 1
        self.seen_signatures.add(key)
        self.eager_compiles += 1
        compile_ns = eager_compile_latency_ns(p, settings.compile_latency_enabled())
        if compile_ns:
            self.timeline.host(compile_ns, "compile")
        self.timeline.issue(p.recorded_kernel_launch_ns, cost.total_ns, name, cost)
        return cost

    def run_executable(
        self, device_ns: int, name: str, n_kernels: int = 1, detail: Any = None
    ) -> tuple[int, int]:
        """Launch a compiled executable taking ``device_ns`` on the device; return (start, end).

        ``detail`` (the executable) is passed on to timeline observers only."""
        self.timeline.host(self.profile.executable_launch_ns, "launch")
        self.executables[name] += 1
        self.executable_kernels += int(n_kernels)
        return self.timeline.enqueue(int(device_ns), name, detail=detail)

    # --- clock -----------------------------------------------------------------------------
    def host(self, ns: int, category: str) -> int:
        """Charge a host-side cost (guard checks, recording, ...) under ``category``."""
        return self.timeline.host(ns, category)

    def synchronize(self) -> int:
        """Host waits for the device; returns the host time."""
        return self.timeline.synchronize()

    def record_event(self) -> int:
        """Timestamp when all work enqueued so far completes."""
        return self.timeline.record_event()

    def wait_event(self, t: int) -> int:
        """Host waits until ``t``; returns the host time."""
        return self.timeline.wait_event(t)

    def notify_sync(self, kind: str) -> None:
        """Tell the listeners that the host is about to observe the device (``kind``:
        "synchronize", "event", "read", "rng-state"), so a mode above can end a deferred region here."""
        for listener in tuple(_sync_listeners):
            listener(self.index, kind)

    @property
    def now(self) -> int:
        """Host time in ns."""
        return self.timeline.host_ns

    def stats(self) -> dict[str, Any]:
        """Counters and the time breakdown as plain data (sorted, so printing is stable)."""
        out: dict[str, Any] = {
            "device": f"neuron:{self.index}",
            "hardware": self.profile.name,
            "ops": dict(sorted(self.ops.items())),
            "kernel_launches": self.kernels,
            "eager_compiles": self.eager_compiles,
            "executables": dict(sorted(self.executables.items())),
            "executable_launches": sum(self.executables.values()),
            "executable_kernels": self.executable_kernels,
            "memory_allocated": self.memory.allocated,
            "peak_memory": self.memory.peak,
            "memory_capacity": self.memory.capacity,
        }
        out.update(self.timeline.breakdown())
        return out

    def __repr__(self) -> str:
        return f"NeuronCore(index={self.index}, profile={self.profile.name!r}, {self.timeline!r})"


def _computes(work: KernelWork) -> bool:
    """Whether a kernel uses a compute engine. Pure data movement (copies, host reads and
    writes) is runtime DMA: it is launched but never compiled to a NEFF."""
    return bool(work.matmuls or work.vector_elems or work.scalar_elems or work.gpsimd_elems)


_cores: dict[int, NeuronCore] = {}
# Called with (device index, kind) at every sync point; module-level so they outlive reset().
_sync_listeners: list[Callable[[int, str], None]] = []


def add_sync_listener(listener: Callable[[int, str], None]) -> None:
    """Register ``listener(index, kind)`` to run at every sync point of every core."""
    if listener not in _sync_listeners:
        _sync_listeners.append(listener)


def remove_sync_listener(listener: Callable[[int, str], None]) -> None:
    if listener in _sync_listeners:
        _sync_listeners.remove(listener)


def device_count() -> int:
    """Number of device indices: one per physical core of the current profile's chip."""
    return settings.current_profile().cores_per_chip


def get_core(index: int = 0) -> NeuronCore:
    """The process-wide core for device index ``index`` (created on first use)."""
    core = _cores.get(index)
    if core is None:
        n = device_count()
        if not 0 <= index < n:
            raise ValueError(
                f"invalid neuron device index {index}: the simulated "
                f"{settings.current_profile().name} chip has {n} NeuronCores (0..{n - 1})"
            )
        core = _cores[index] = NeuronCore(index)
    return core


def reset() -> None:
    """Forget every core (fresh clocks, memory and counters). For tests and benchmarks."""
    _cores.clear()


def _on_hardware_change(profile: HardwareProfile) -> None:
    for core in _cores.values():
        core.set_profile(profile)


settings.on_hardware_change(_on_hardware_change)


def stats() -> dict[str, Any]:
    """Every core's counters (``NeuronCore.stats``), by device (``"neuron:0"``, ...)."""
    return {f"neuron:{i}": core.stats() for i, core in sorted(_cores.items())}


state.register("hardware", reset=reset, stats=stats)
