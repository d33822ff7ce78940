"""The state of one kernel run: the profile, on-chip allocations and the instruction stream.

Why one object per run: a kernel is traced by running it as plain Python; every
``nki.language`` / ``nki.isa`` call computes its numbers at once (on CPU tensors) and
appends one ``Instruction`` here. The schedule (``schedule.py``) is then a pure function
of that stream and the profile, so two runs of a kernel give the same nanoseconds.

On-chip memory is accounted per partition, as the hardware lays it out: a tile of shape
``(P, F1, F2, ...)`` takes ``F1 * F2 * ... * itemsize`` bytes in each of its partitions.
A tile is freed when the kernel drops its last reference (CPython's reference counting
is deterministic, so capacity errors are too).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from torchneuron.hardware import HardwareProfile

from .errors import NKIError, user_line

__all__ = ["Allocation", "Instruction", "KernelContext", "current", "active"]


@dataclass
class Instruction:
    """One instruction on one engine: what it reads and writes (allocation ids) and its work.

    ``work``: engine-specific sizes for the cost (see ``schedule.instruction_ns``).
    """

    name: str
    engine: str  # tensor | vector | scalar | gpsimd | dma
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    work: dict[str, Any]
    line: str
    index: int = 0


@dataclass
class Allocation:
    """One tensor's storage: in HBM (kernel arguments and outputs) or a tile on chip."""

    id: int
    buffer: str  # sbuf | psum | hbm
    per_partition_bytes: int
    partitions: int


@dataclass
class KernelContext:
    """Everything one run of a kernel produced and needs."""

    profile: HardwareProfile
    name: str = "kernel"
    instructions: list[Instruction] = field(default_factory=list)
    live: dict[str, int] = field(default_factory=lambda: {"sbuf": 0, "psum": 0})
    peak: dict[str, int] = field(default_factory=lambda: {"sbuf": 0, "psum": 0})
    program_ids: tuple[int, ...] = ()
    grid: tuple[int, ...] = ()
    hbm_shared: list[Any] = field(default_factory=list)  # shared_hbm tensors, by order
    hbm_seen: int = 0  # shared_hbm allocations made by the running SPMD instance
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    # --- memory ----------------------------------------------------------------------
    def capacity(self, buffer: str) -> int:
        """Bytes per partition of ``buffer`` on this profile."""
        p = self.profile
        total = p.sbuf_bytes if buffer == "sbuf" else p.psum_bytes
        return total // p.sbuf_partitions

    def allocate(self, owner: object, buffer: str, shape: tuple[int, ...], itemsize: int,
                 api: str) -> Allocation:
        """Account a new tensor; raise ``NKIError`` if a tile breaks a partition or capacity rule."""
        aid = next(self._ids)
        if buffer not in ("sbuf", "psum"):
            return Allocation(aid, "hbm", 0, 0)
        p = self.profile
        parts = shape[0] if shape else 1
        if parts > p.sbuf_partitions:
            raise NKIError(
                api, f"partition dimension <= {p.sbuf_partitions}",
                f"a {buffer.upper()} tile of shape {tuple(shape)} has {parts} partitions",
                "Tile the first dimension in chunks of nl.tile_size.pmax (128)")
        free = 1
        for s in shape[1:]:
            free *= s
        per = free * itemsize
        if buffer == "psum" and per > p.psum_bank_bytes:
            raise NKIError(
                api, f"a PSUM tile fits one bank: <= {p.psum_bank_bytes} bytes per partition "
                f"({p.psum_bank_fp32_cols} fp32)",
                f"a PSUM tile of shape {tuple(shape)} needs {per} bytes per partition",
                "Split the free dimension in chunks of nl.tile_size.psum_fmax (512)")
        cap = self.capacity(buffer)
        if self.live[buffer] + per > cap:
            raise NKIError(
                api, f"{buffer.upper()} capacity of {p.name}: {cap} bytes per partition "
                f"({(p.sbuf_bytes if buffer == 'sbuf' else p.psum_bytes) // 1024} KiB in all)",
                f"allocating {tuple(shape)} ({per} bytes per partition) with "
                f"{self.live[buffer]} bytes per partition already live",
                "Use smaller tiles, or let tiles of earlier iterations go out of scope")
        self.live[buffer] += per
        self.peak[buffer] = max(self.peak[buffer], self.live[buffer])
        weakref.finalize(owner, self._free, buffer, per)
        return Allocation(aid, buffer, per, parts)

    def _free(self, buffer: str, per: int) -> None:
        self.live[buffer] -= per

    # --- instructions ----------------------------------------------------------------
    def emit(self, name: str, engine: str, reads: list[Any], writes: list[Any],
             **work: Any) -> Instruction:
        """Append one instruction; ``reads`` / ``writes`` are NkiTensors (or None)."""
        ins = Instruction(
            name, engine,
            tuple(sorted({t.alloc.id for t in reads if t is not None})),
            tuple(sorted({t.alloc.id for t in writes if t is not None})),
            work, user_line(), len(self.instructions))
        self.instructions.append(ins)
        return ins


class _Stack(threading.local):
    """Per thread: a background compile traces kernels (an ``nki_op``'s fake, or its
    cost plan) while the main thread runs others; one shared stack mixed their
    instructions and allocations."""

    def __init__(self) -> None:
        self.items: list[KernelContext] = []


_local = _Stack()


def current(api: str = "nki") -> KernelContext:
    """The running kernel's context (this thread's); outside a kernel, a clear error."""
    stack = _local.items
    if not stack:
        raise RuntimeError(
            f"{api} was called outside an NKI kernel: call it inside a function decorated "
            "with @nki.jit (or run through nki.simulate(kernel))")
    return stack[-1]


class active:
    """``with active(ctx):`` makes ``ctx`` the running kernel's context."""

    def __init__(self, ctx: KernelContext) -> None:
        self.ctx = ctx

    def __enter__(self) -> KernelContext:
        _local.items.append(self.ctx)
        return self.ctx

    def __exit__(self, *exc: object) -> None:
        _local.items.pop()


# --- where a kernel called on CPU values goes (set by an nki_op) -----------------------


class _Sinks(threading.local):
    """Where this thread's kernels called on CPU values go: a core (charged as a launch)
    or a list (their schedules collected). Per thread: an AE background compile runs an
    op's fake or cost plan (kernels on zeros) while the main thread runs the op on the
    device; with one shared stack the plan's kernels were charged to the main thread's
    core (``tiled_add_kernel`` counted 9 times for 8 calls, issue 25)."""

    def __init__(self) -> None:
        self.items: list[Any] = []


_sinks = _Sinks()


@contextlib.contextmanager
def charging(core: Any) -> Iterator[None]:
    """While active, a kernel called on CPU values is charged to ``core`` as a launch."""
    _sinks.items.append(core)
    try:
        yield
    finally:
        _sinks.items.pop()


@contextlib.contextmanager
def collecting() -> Iterator[list[Any]]:
    """While active, a kernel called on CPU values appends its schedule to the list
    yielded, and charges nothing (a cost plan, or a run inside an executable)."""
    sink: list[Any] = []
    _sinks.items.append(sink)
    try:
        yield sink
    finally:
        _sinks.items.pop()


def current_sink() -> Any:
    """This thread's innermost ``charging`` core or ``collecting`` list, else None."""
    items = _sinks.items
    return items[-1] if items else None


def current_core() -> Any:
    """This thread's innermost ``charging`` core, or None."""
    sink = current_sink()
    return None if isinstance(sink, list) else sink
