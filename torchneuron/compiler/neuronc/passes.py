"""The pass pipeline, in order, and ``compile_module`` which runs it.

Why a list: the order is the design (fold before fusing so constants do not become
kernels; allocate before schedule so spills are costed), and a list makes it visible
and lets callers switch passes off by name (``options={"fuse": False}``).
``fuse`` switched off still produces one kernel per op (later passes need kernels);
``dce`` and ``constant_fold`` switched off simply do not run. ``assign_engines``,
``tile``, ``allocate`` and ``schedule`` produce the cost and cannot be disabled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchneuron.compiler.stablehlo import Module
from torchneuron.hardware import HardwareProfile

from . import allocate, assign_engines, constant_fold, dce, fuse, schedule, tile
from .program import Program

Pass = Callable[[Program, HardwareProfile], Program]

PASSES: list[tuple[str, Pass]] = [
    ("dce", dce.run),
    ("constant_fold", constant_fold.run),
    ("fuse", fuse.run),
    ("assign_engines", assign_engines.run),
    ("tile", tile.run),
    ("allocate", allocate.run),
    ("schedule", schedule.run),
]
OPTIONAL = frozenset({"dce", "constant_fold", "fuse"})


def compile_module(
    module: Module, profile: HardwareProfile, options: dict[str, Any] | None = None
) -> Program:
    """Run ``PASSES`` on ``module``'s entry function and return the costed program.

    ``options`` maps a pass name to False to disable it (only ``OPTIONAL`` ones).
    Unknown option names raise, so a typo cannot silently leave fusion on.
    """
    options = dict(options or {})
    names = {name for name, _ in PASSES}
    unknown = sorted(set(options) - names)
    if unknown:
        raise ValueError(f"unknown neuronc options {unknown}; known passes: {sorted(names)}")
    forced = sorted(n for n, v in options.items() if not v and n not in OPTIONAL)
    if forced:
        raise ValueError(f"passes {forced} produce the cost and cannot be disabled")
    if module.entry not in module.functions:
        raise ValueError(f"module has no entry function {module.entry!r}")
    program = Program(module=module, profile=profile.name)
    for name, run in PASSES:
        enabled = bool(options.get(name, True))
        if name == "fuse":
            program = fuse.run(program, profile, enabled=enabled)
        elif enabled:
            program = run(program, profile)
        program.passes_run.append(name if enabled else f"{name}(off)")
    return program
