"""The pass pipeline, in order, and ``compile_module`` which runs it.

Why a list: the order is the design (fold before fusing so constants do not become
kernels; allocate before schedule so spills are costed), and a list makes it visible
and lets callers switch passes off by name (``options={"fuse": False}``).
``fuse`` switched off still produces one kernel per op (later passes need kernels);
``dce`` and ``constant_fold`` switched off simply do not run. ``assign_engines``,
``tile``, ``allocate`` and ``schedule`` produce the cost and cannot be disabled.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from torchneuron.compiler.stablehlo import Module
from torchneuron.hardware import HardwareProfile

from . import allocate, assign_engines, constant_fold, dce, fuse, schedule, tile
from .program import Program

# each pass is a module with ``run(program, profile) -> program``
PASSES: list[ModuleType] = [dce, constant_fold, fuse, assign_engines, tile, allocate, schedule]
OPTIONAL = frozenset({"dce", "constant_fold", "fuse"})


def pass_name(module: ModuleType) -> str:
    """``torchneuron.compiler.neuronc.fuse`` -> ``fuse``: the name options use."""
    return module.__name__.rsplit(".", 1)[-1]


def compile_module(
    module: Module, profile: HardwareProfile, options: dict[str, Any] | None = None
) -> Program:
    """Run ``PASSES`` on ``module``'s entry function and return the costed program.

    ``options`` maps a pass name to False to disable it (only ``OPTIONAL`` ones).
    Unknown option names raise, so a typo cannot silently leave fusion on.
    """
    options = dict(options or {})
    names = {pass_name(p) for p in PASSES}
    unknown = sorted(set(options) - names)
    if unknown:
        raise ValueError(f"unknown neuronc options {unknown}; known passes: {sorted(names)}")
    forced = sorted(n for n, v in options.items() if not v and n not in OPTIONAL)
    if forced:
        raise ValueError(f"passes {forced} produce the cost and cannot be disabled")
    if module.entry not in module.functions:
        raise ValueError(f"module has no entry function {module.entry!r}")
    program = Program(module=module, profile=profile.name)
    for module_ in PASSES:
        name = pass_name(module_)
        enabled = bool(options.get(name, True))
        if name == "fuse":
            program = fuse.run(program, profile, enabled=enabled)
        elif enabled:
            program = module_.run(program, profile)
        program.passes_run.append(name if enabled else f"{name}(off)")
    return program
