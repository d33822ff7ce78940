"""The simulated background compiler: workers that take queued compiles by priority.

Why a queue with priorities: adaptive eager submits a region's compile when the region
gets hot, and many regions get hot within the first steps (a model's blocks, its
optimizer update, the pieces between). Compiling them first come, first served lets a
region that saves little on every replay hold a worker while one that saves much waits.
Each job carries a priority (adaptive eager gives its predicted saving per second of
compile, so blocks shared by identical layers, replayed once per layer, go first), and a
worker that frees takes the highest-priority job submitted by then. ``workers`` compiles
run at once (the profile's ``compile_parallelism``).

Everything is on the simulated clock and decided lazily: a job's start is fixed only
once the host has reached it (``done_at(job, now)``), because a job submitted later but
before that start may outrank it. The same op stream therefore gives the same schedule
on every run, whatever the real compiles do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CompileQueue"]


@dataclass
class _Job:
    submitted_ns: int
    latency_ns: int
    priority: float
    start_ns: int | None = None


class CompileQueue:
    """Background compiles on ``workers`` simulated workers, highest priority first."""

    def __init__(self, workers: int = 1,
                 on_start: Callable[[int, int], None] | None = None) -> None:
        self.workers_free_ns = [0] * max(1, int(workers))
        self.jobs: list[_Job] = []
        self.pending: list[int] = []
        self.busy_ns = 0  # modeled latency of every job started so far
        self.on_start = on_start  # (start, end) of each job, for timeline observers

    def submit(self, now_ns: int, latency_ns: int, priority: float = 0.0) -> int:
        """Queue a compile of ``latency_ns`` at ``now_ns``; return its job id."""
        latency_ns = int(latency_ns)
        if latency_ns < 0:
            raise ValueError(f"compile latency must be >= 0 ns, got {latency_ns}")
        self.jobs.append(_Job(int(now_ns), latency_ns, float(priority)))
        self.pending.append(len(self.jobs) - 1)
        return len(self.jobs) - 1

    def done_at(self, job: int, now_ns: int) -> int | None:
        """When ``job`` finishes, once its start is decided (the host is at or past it);
        None while it still waits for a worker."""
        self._run(int(now_ns))
        j = self.jobs[job]
        return None if j.start_ns is None else j.start_ns + j.latency_ns

    @property
    def free_ns(self) -> int:
        """When every started job is done."""
        return max(self.workers_free_ns)

    def _run(self, now_ns: int) -> None:
        """Start every job whose start is at or before ``now_ns``, in worker order."""
        free = self.workers_free_ns
        while self.pending:
            slot = min(range(len(free)), key=lambda i: (free[i], i))
            t = free[slot]
            waiting = [k for k in self.pending if self.jobs[k].submitted_ns <= t]
            if not waiting:  # the worker idles until the next submission
                t = min(self.jobs[k].submitted_ns for k in self.pending)
                waiting = [k for k in self.pending if self.jobs[k].submitted_ns == t]
            if t > now_ns:
                return  # not decided: a job submitted before t may still outrank these
            k = min(waiting, key=lambda k: (-self.jobs[k].priority, k))
            job = self.jobs[k]
            job.start_ns = t
            free[slot] = t + job.latency_ns
            self.busy_ns += job.latency_ns
            self.pending.remove(k)
            if self.on_start is not None:
                self.on_start(t, free[slot])
