"""One launch path for executables: what torch.compile and adaptive eager both charge.

A compiled program costs the host three things on the simulated clock: its compile
latency (once, when it is built on the critical path), a guard evaluation per call, and
the launch of the executable; it runs with the device's random generator swapped in, so
its lifted random inputs are eager's draws. ``dynamo/`` and ``adaptive_eager/`` call these
functions instead of charging the core themselves, so both paths cost the same.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.executable import Executable
from torchneuron.compiler.prepare.index_bounds import raised_by_index_check
from torchneuron.device import random
from torchneuron.hardware import NeuronCore, compile_latency_enabled, program_compile_latency_ns

__all__ = ["compile_latency_ns", "charge_compile", "launch"]


def compile_latency_ns(core: NeuronCore, n_ops: int) -> int:
    """Modeled latency of compiling a program of ``n_ops`` ops on ``core``'s profile."""
    return program_compile_latency_ns(core.profile, n_ops, compile_latency_enabled())


def charge_compile(core: NeuronCore, exe: Executable) -> int:
    """Charge ``exe``'s compile latency on the host (a compile on the critical path).

    An executable loaded from the cache was not compiled: it costs nothing here."""
    if exe.from_cache:
        return 0
    ns = compile_latency_ns(core, int(exe.signature["num_stablehlo_ops"]))
    core.host(ns, "compile")
    return ns


def launch(exe: Executable, inputs: list[torch.Tensor], core: NeuronCore, index: int,
           guard_ns: int) -> list[Any]:
    """Charge ``guard_ns`` of guard evaluation, then run ``exe`` on ``inputs`` (CPU
    buffers) with device ``index``'s generator: write-backs land in the inputs, the
    launch and the device time are charged to ``core``. Returns the user outputs; if
    the executable's index check fails, the generator is left as before the run."""
    core.host(guard_ns, "guard")
    if not exe.signature["random_inputs"]:
        return exe.run(inputs, core, lambda: random.rng_state_swapped(index))
    gen = random.generator(index)
    before = gen.get_state()
    try:
        return exe.run(inputs, core, lambda: random.rng_state_swapped(index))
    except Exception as e:
        if raised_by_index_check(e):
            # The caller redoes the ops eagerly from the untouched inputs, and they draw
            # again: the generator must be where eager's first draw finds it.
            gen.set_state(before)
        raise
