"""An ``nki_op`` as a custom-call target: how its kernels run inside an executable.

Why: under ``torch.compile(backend="neuron")`` (and adaptive eager) the op is carried
into the compiled program as a ``stablehlo.custom_call`` naming this target
(``compiler/prepare/custom_calls.py``), instead of the whole graph running eagerly. The program
stays data; this process registers, under the op's name, the code that computes it:

- ``plan``: the op's implementation on zeros of the call's shapes, its kernels'
  schedules collected, not charged, and summed (its kernels run one after the other):
  per-engine busy time, fixed cost, total, roofline, HBM bytes and TensorE tiles. neuronc
  costs the call with it;
- ``run``: the implementation on the call's operands (CPU buffers of the program), its
  kernels' schedules collected; the executable charges the plan, plus the difference if
  the kernels took another time on these values (MoE's blocks per expert depend on the
  routing).

A mutating op (``mutates_args``) registers the same target: ``run`` is the op's own
implementation, which writes its arguments; the compiler hands it copies of the
arguments the call writes and returns them (``custom_targets.call_target``), as
functionalization's ``auto_functionalized`` does. An op that returns nothing has no
outputs of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.stablehlo.custom_targets import CustomCallTarget, register_target
from torchneuron.hardware import ENGINES

from ._context import collecting

__all__ = ["register_op_target", "target_name", "plan_of_schedules", "trace_of"]


def target_name(qualname: str) -> str:
    """``nki_lib::rms_norm`` -> ``nki.nki_lib.rms_norm`` (a plain symbol for MLIR)."""
    return "nki." + qualname.replace("::", ".")


def register_op_target(op: Any, impl: Callable[..., Any], qualname: str) -> None:
    """Register ``impl`` (the op's implementation on CPU tensors) as the target of
    ``op`` (a ``CustomOpDef``)."""
    def run(args: list[Any], kwargs: dict[str, Any]) -> tuple[list[torch.Tensor], int, list]:
        with collecting() as schedules:
            out = impl(*args, **kwargs)
        outs = [] if out is None else [out] if isinstance(out, torch.Tensor) else list(out)
        return outs, sum(s.total_ns for s in schedules), trace_of(schedules)

    def plan(args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        with collecting() as schedules:
            impl(*args, **kwargs)
        return plan_of_schedules(schedules)

    overload = getattr(getattr(torch.ops, qualname.split("::")[0]),
                       qualname.split("::")[1]).default
    register_target(CustomCallTarget(target_name(qualname), run, plan, op=overload))


def trace_of(schedules: list[Any]) -> list[tuple[str, str, int, int, str]]:
    """The kernels' instructions one after the other, on the tracks eager launches use
    (``nki.tensor``, ``nki.dma``, ...), relative to the first kernel's start."""
    out, at = [], 0
    for s in schedules:
        for engine, name, start, end, line in s.timeline:
            out.append((f"nki.{engine}", name, at + s.fixed_ns + start, at + s.fixed_ns + end,
                        line))
        at += s.total_ns
    return out


def plan_of_schedules(schedules: list[Any]) -> dict[str, Any]:
    """The schedules of kernels run one after the other, as one plan (JSON-safe)."""
    busy = {e: sum(s.engine_busy_ns.get(e, 0) for s in schedules) for e in ENGINES}
    tiles: dict[tuple[Any, ...], int] = {}
    for s in schedules:
        for count, *shape in s.matmuls:
            tiles[tuple(shape)] = tiles.get(tuple(shape), 0) + count
    busiest = max(ENGINES, key=lambda e: busy[e])
    return {
        "kernels": [s.name for s in schedules],
        "engine_ns": busy,
        "fixed_ns": sum(s.fixed_ns for s in schedules),
        "total_ns": sum(s.total_ns for s in schedules),
        "roofline_ns": sum(s.roofline_ns for s in schedules),
        "bound": busiest if busy[busiest] else "fixed",
        "hbm_bytes": sum(s.hbm_bytes for s in schedules),
        "matmuls": [[c, *shape] for shape, c in sorted(tiles.items(), key=str)],
    }
