"""The targets a ``stablehlo.custom_call`` may name: registered by name, never loaded.

Why a registry and not code in the program: an executable is data (a cache entry must
not be able to run code). A custom call names its target (``call_target_name``) and
carries plain JSON (``backend_config``); the code that computes it is whatever this
process registered under that name (an ``nki_op`` registers itself when it is defined).
A program naming a target nobody registered cannot run here: the cache treats it as a
miss, the interpreter raises naming it.

A target has two functions (and two optional facts, below):

- ``plan(args, kwargs) -> dict``: at compile time, in the process that compiles (the
  worker has no user code), the device cost of one call on inputs of these shapes
  (zeros): ``engine_ns`` per engine, ``fixed_ns``, ``total_ns``, ``roofline_ns``,
  ``bound``, ``hbm_bytes`` and ``matmuls`` (``[count, m, k, n, dtype]`` rows); neuronc
  schedules the call with it;
- ``run(args, kwargs) -> (outputs, total_ns, trace)``: at run time, the outputs (CPU
  tensors), the device time this call took and its instructions for the profiler
  (``(track, name, start_ns, end_ns, line)`` relative to the call's start). A call whose
  time differs from its plan (its work depends on the values, as MoE's routing does)
  charges the difference on top of the executable's time (``take_calls``), so the device
  is charged what the kernels did.

A call of an op that writes some of its inputs (``mutates_args``: functionalization made
it ``auto_functionalized``) lists those operands in ``config["mutated"]``: ``call_target``
runs the target on copies of them (a mutated argument that is a slice of its base is
``{"tensor": i, "slice": [dim, start, end]}``, regenerated on the copy) and returns,
after the op's own outputs, their new values, as PyTorch's ``auto_functionalized``
does; the graph copies them back into the inputs (write-backs). The target itself stays
an op that writes its arguments: it is the op's own implementation.

A target that computes an aten op with eager's own kernel (``decomp/eager_kernels``) has
no plan: its ``costed`` form (fusion kind, vector and scalar passes per element) lets
neuronc fuse and cost the call as the op it stands for, and ``carry_if(args, kwargs)``
says which calls of the op are carried (the others lower as before).

Imports only the standard library (``operand_layout``, which imports torch, when a call of
eager's kernel runs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CustomCallTarget", "TargetRaised", "register_target", "lookup_target",
           "target_for_op", "registered_targets", "fill_arguments", "call_target",
           "record_call", "take_calls"]


class TargetRaised(Exception):
    """A target computing eager's own op raised eager's error (``IndexError: Target 7 is
    out of bounds``): the program stops and the executable re-raises ``error`` as it is,
    the error the user's eager program would have raised at that op."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class CustomCallTarget:
    """One registered target (see the module docstring)."""

    name: str
    run: Callable[[list[Any], dict[str, Any]], tuple[Any, int, list[Any]]]
    plan: Callable[[list[Any], dict[str, Any]], dict[str, Any]] | None
    op: Any = None  # the PyTorch op it stands for (an OpOverload), if any
    costed: dict[str, Any] | None = None  # neuronc costs the call as an op of this form
    carry_if: Callable[[tuple[Any, ...], dict[str, Any]], bool] | None = None


_TARGETS: dict[str, CustomCallTarget] = {}
_BY_OP: dict[Any, CustomCallTarget] = {}


def register_target(target: CustomCallTarget) -> None:
    """Register (or replace: a redefined op replaces its target) ``target``."""
    _TARGETS[target.name] = target
    if target.op is not None:
        _BY_OP[target.op] = target


def lookup_target(name: str) -> CustomCallTarget | None:
    """The target registered under ``name``, or None."""
    return _TARGETS.get(name)


def target_for_op(op: Any) -> CustomCallTarget | None:
    """The target registered for the PyTorch op ``op`` (an OpOverload), or None."""
    return _BY_OP.get(op)


def registered_targets() -> list[CustomCallTarget]:
    """Every target registered in this process (the latest of each name)."""
    return list(_TARGETS.values())


def fill_arguments(config: dict[str, Any], tensors: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """The call's (args, kwargs): ``config["args"]`` / ``config["kwargs"]`` with each
    ``{"tensor": i}`` slot replaced by ``tensors[i]`` (the custom call's operands); other
    objects (``{"dtype": name}``) are left for the target to read. A call of eager's
    kernel gets each operand in the layout eager's had: the slot's ``strides``, or
    contiguous without them (``operand_layout``: ATen's loops follow the strides)."""
    layout = "costed" in config  # (a call of eager's kernel: ``decomp/eager_kernels``)
    return ([_fill(a, tensors, layout) for a in config.get("args", [])],
            {k: _fill(v, tensors, layout) for k, v in config.get("kwargs", {}).items()})


def _fill(v: Any, tensors: list[Any], layout: bool = False) -> Any:
    # (a module function: a nested one that calls itself is a reference cycle that keeps
    # the operands alive until the garbage collector runs, and the device's memory with them)
    if isinstance(v, dict):
        if "tensor" not in v:
            return v
        t = tensors[v["tensor"]]
        if "slice" in v:  # a mutated argument that is a slice of its base (call_target)
            dim, start, end = v["slice"]
            return t.narrow(dim, start, end - start)
        if layout:  # eager's kernel: its operand in eager's strides (operand_layout)
            from torchneuron.compiler.stablehlo.operand_layout import in_layout

            return in_layout(t, v.get("strides"))
        return t
    if isinstance(v, list):
        return [_fill(x, tensors, layout) for x in v]
    return v


def call_target(target: CustomCallTarget, config: dict[str, Any], operands: list[Any]
                ) -> tuple[list[Any], int, list[Any]]:
    """Run ``target`` on a call's operands as ``config`` says: ``(outputs, ns, trace)``.

    The operands are never written: a mutating call (``config["mutated"]``) runs on
    copies (``clone`` keeps a dense operand's strides, as ``clone_preserve_strides``
    does) and returns their new values after the op's outputs."""
    mutated = config.get("mutated") or []
    if mutated:
        operands = list(operands)
        for i in mutated:
            operands[i] = operands[i].clone()
    args, kwargs = fill_arguments(config, operands)
    outs, ns, trace = target.run(args, kwargs)
    if mutated:
        outs = [*outs, *(operands[i] for i in mutated)]
    return list(outs), ns, trace


class _Calls(threading.local):
    def __init__(self) -> None:
        self.extra_ns = 0
        self.traces: list[list[Any]] = []


_calls = _Calls()


def record_call(planned_ns: int, ns: int, trace: list[Any]) -> None:
    """A call ran ``ns`` where its plan said ``planned_ns``; ``trace`` its instructions."""
    _calls.extra_ns += int(ns) - int(planned_ns)
    _calls.traces.append(trace)


def take_calls() -> tuple[int, list[list[Any]]]:
    """This thread's calls since the last take (and forget them): the total difference
    from their plans, and their traces in the order they ran."""
    out = (_calls.extra_ns, _calls.traces)
    _calls.extra_ns, _calls.traces = 0, []
    return out
