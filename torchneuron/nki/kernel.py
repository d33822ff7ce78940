"""``nki.jit`` and ``nki.simulate``: run a kernel on CPU values, on neuron tensors, or both.

Why one ``Kernel`` object for every mode: the kernel is traced by running it as plain
Python (so Python meta-programming works, as in NKI 0.7); the same run computes its
values and its instruction stream. What differs is only where the values come from and
whether the simulated core is charged:

- CPU tensors or numpy arrays (``nki.simulate(kernel)(...)`` or a direct call): values
  only; ``kernel.last_schedule`` / ``kernel.report()`` give the simulated time anyway;
- ``neuron`` tensors: the kernel runs on the simulated core of their device, charged
  once as one eager kernel launch (NEFF compile on a new signature, launch, then the
  kernel's own schedule on the device queue); its instructions appear per engine in the
  profiler's Chrome trace (tracks ``nki.tensor``, ``nki.vector``, ...).

``kernel[grid](...)`` runs the SPMD instances one after the other, ``nl.program_id``
telling each its index; their instructions share one schedule.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from torchneuron.hardware import current_profile, get_core

from ._context import KernelContext, active, current_sink
from .errors import NKIError
from .schedule import KernelSchedule, schedule
from .tensor import NkiTensor

__all__ = ["Kernel", "deliver", "jit", "simulate", "simulate_kernel"]

_NO_64BIT = {torch.float64: torch.float32, torch.int64: torch.int32}


class Kernel:
    """A kernel function, callable on CPU values or neuron tensors (see module docstring)."""

    def __init__(self, fn: Callable[..., Any], grid: tuple[int, ...] = ()) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.grid = grid
        self.name = getattr(fn, "__name__", "kernel")
        self.last_schedule: KernelSchedule | None = None

    def __getitem__(self, grid: Any) -> Kernel:
        g = (grid,) if isinstance(grid, int) else tuple(grid)
        k = Kernel(self.fn, g)
        k.last_schedule = None
        return k

    # Dynamo never traces a kernel's Python (its instructions read real values): a direct
    # call under torch.compile is a graph break, and the kernel runs eagerly on the device.
    # (Wrap the kernel in an ``nki_op`` to keep it one node of the graph.)
    @torch.compiler.disable
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(_is_neuron(a) for a in (*args, *kwargs.values())):
            return run_on_device(self, args, kwargs)
        out, sched = self.trace(args, kwargs)
        deliver(sched, device_signature(args, kwargs))
        return _to_user(out, numpy=any(isinstance(a, np.ndarray) for a in args))

    # --- one run ------------------------------------------------------------------------
    def trace(self, args: tuple, kwargs: dict, profile: Any = None) -> tuple[Any, KernelSchedule]:
        """Run the kernel on CPU values: (its outputs as CPU tensors, its schedule)."""
        p = profile if profile is not None else current_profile()
        ctx = KernelContext(p, name=self.name, grid=self.grid)
        hbm_args = [_to_hbm(a, ctx, i) for i, a in enumerate(args)]
        hbm_kwargs = {k: _to_hbm(v, ctx, k) for k, v in kwargs.items()}
        out: Any = None
        threads = torch.get_num_threads()
        # tiles are small: one intra-op thread is several times faster than a contended
        # pool (and the values do not depend on it: each instruction is one small op;
        # the setting is per thread, as OpenMP's is)
        torch.set_num_threads(1)
        try:
            out = self._run(ctx, hbm_args, hbm_kwargs)
        finally:
            torch.set_num_threads(threads)
        sched = schedule(self.name, ctx.instructions, p, ctx.peak["sbuf"], ctx.peak["psum"])
        self.last_schedule = sched
        return _from_hbm(out), sched

    def _run(self, ctx: KernelContext, args: list, kwargs: dict) -> Any:
        """The kernel's Python, once per SPMD instance of the grid."""
        out: Any = None
        with active(ctx):
            for ids in itertools.product(*(range(g) for g in self.grid)) if self.grid else [()]:
                ctx.program_ids = ids
                ctx.hbm_seen = 0
                out = self.fn(*args, **kwargs)
        return out

    def report(self) -> str:
        """The last run's schedule: simulated time, roofline share, per-engine busy time."""
        if self.last_schedule is None:
            raise RuntimeError(f"kernel {self.name} has not run yet: call it first")
        return self.last_schedule.report()

    def __repr__(self) -> str:
        return f"nki.jit({self.name})"


def jit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Decorate a kernel function (``@nki.jit`` or ``@nki.jit(...)``); options are accepted
    for compatibility and ignored (the simulator has one target: the current profile)."""
    if fn is None:
        return lambda f: Kernel(f)
    return Kernel(fn) if not isinstance(fn, Kernel) else fn


def simulate(kernel: Any) -> Callable[..., Any]:
    """``nki.simulate(kernel)(*arrays)``: run on numpy arrays or CPU tensors, values only."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)

    def run(*args: Any, **kwargs: Any) -> Any:
        if any(_is_neuron(a) for a in (*args, *kwargs.values())):
            raise TypeError("nki.simulate runs on numpy arrays or CPU tensors; call the kernel "
                            "directly to run it on neuron tensors")
        out, _ = k.trace(args, kwargs)
        return _to_user(out, numpy=any(isinstance(a, np.ndarray) for a in args))

    run.kernel = k  # type: ignore[attr-defined]
    return run


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """NKI's older spelling: ``nki.simulate_kernel(kernel, *arrays)``."""
    return simulate(kernel)(*args, **kwargs)


# --- arguments ----------------------------------------------------------------------------------
def _is_neuron(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and a.device.type == "neuron"


def _to_hbm(a: Any, ctx: KernelContext, pos: Any) -> Any:
    if isinstance(a, np.ndarray):
        a = torch.from_numpy(a)
    if not isinstance(a, torch.Tensor):
        return a
    if a.dtype in _NO_64BIT:
        raise NKIError(f"{ctx.name} argument {pos}", "NeuronCores have no 64-bit datapath",
                       f"the argument has dtype {a.dtype}",
                       f"Cast it first, e.g. .to({_NO_64BIT[a.dtype]})")
    t = NkiTensor(a, "hbm", None)  # type: ignore[arg-type]
    t.alloc = ctx.allocate(t, "hbm", tuple(a.shape), a.element_size(), "nki.jit")
    return t


def _from_hbm(out: Any) -> Any:
    if isinstance(out, NkiTensor):
        if out.buffer != "hbm":
            raise NKIError("return", "a kernel returns HBM tensors",
                           f"it returned an on-chip tile {out!r}",
                           "Allocate the output with nl.ndarray(..., buffer=nl.shared_hbm) "
                           "and nl.store into it")
        return out.data
    if isinstance(out, (tuple, list)):
        return type(out)(_from_hbm(o) for o in out)
    return out


def _to_user(out: Any, numpy: bool) -> Any:
    if isinstance(out, torch.Tensor):
        if numpy and out.dtype not in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
            return out.numpy()
        return out
    if isinstance(out, (tuple, list)):
        return type(out)(_to_user(o, numpy) for o in out)
    return out


def device_signature(args: tuple, kwargs: dict) -> tuple:
    """What a compiled NEFF of the kernel depends on: shapes, dtypes and Python values."""
    def sig(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return (tuple(a.shape), str(a.dtype))
        return repr(a)

    return tuple(sig(a) for a in args) + tuple((k, sig(v)) for k, v in sorted(kwargs.items()))


def run_on_device(kernel: Kernel, args: tuple, kwargs: dict) -> Any:
    """Run ``kernel`` on neuron tensors: values on their buffers, time on their core."""
    from torchneuron.device.tensor import wrap_buffer as wrap

    index = next(a.device.index or 0 for a in (*args, *kwargs.values()) if _is_neuron(a))
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor) and a.device != torch.device("neuron", index):
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two "
                f"devices, neuron:{index} and {a.device}! (kernel {kernel.name})")
    bufs = {id(a): a.buffer for a in (*args, *kwargs.values()) if _is_neuron(a)}
    cpu_args = tuple(bufs.get(id(a), a) for a in args)
    cpu_kwargs = {k: bufs.get(id(v), v) for k, v in kwargs.items()}
    core = get_core(index)
    out, sched = kernel.trace(cpu_args, cpu_kwargs, core.profile)
    charge(core, f"nki.{kernel.name}", device_signature(cpu_args, cpu_kwargs), sched)
    originals = {a.buffer.data_ptr(): a for a in (*args, *kwargs.values()) if _is_neuron(a)}
    return _wrap_out(out, index, originals, wrap)


def deliver(sched: KernelSchedule, signature: tuple) -> None:
    """Hand a schedule run on CPU values to this thread's sink (``charging`` /
    ``collecting``): charged to the core as one launch, collected, or (no sink: a
    plain CPU call) dropped."""

    sink = current_sink()
    if isinstance(sink, list):  # an nki_op planned or run inside an executable
        sink.append(sched)
    elif sink is not None:  # called by an nki_op on neuron tensors' buffers
        charge(sink, f"nki.{sched.name}", signature, sched)


def charge(core: Any, name: str, signature: tuple, sched: KernelSchedule) -> None:
    """One eager launch of the kernel on ``core``, its device time being its schedule; the
    instructions go to the observers (profiler) on per-engine tracks."""
    from torchneuron.hardware import KernelWork

    work = KernelWork(vector_elems=1, hbm_read_bytes=sched.hbm_bytes)  # marks "computes"
    core.run_eager_kernel(name, signature, work, cost=sched.kernel_cost())
    tl = core.timeline
    if tl.observers:
        start = tl.device_free_ns - sched.total_ns + sched.fixed_ns
        for engine, ins, s, e, line in sched.timeline:
            tl.emit(f"nki.{engine}", ins, start + s, start + e, line)


def _wrap_out(out: Any, index: int, originals: dict, wrap: Any) -> Any:
    if isinstance(out, torch.Tensor):
        same = originals.get(out.data_ptr())
        if same is not None and same.shape == out.shape:
            return same
        return wrap(out, index)
    if isinstance(out, (tuple, list)):
        return type(out)(_wrap_out(o, index, originals, wrap) for o in out)
    return out
