"""Typed compile errors: every stage fails loudly with a countable reason.

DESIGN.md section 5: a stage that cannot handle a graph must fail loudly so the caller
falls back (to eager, or to CPU for one op) and *counts why*. So each error carries a
``stage`` and a short ``reason`` string that is safe to use as a counter key, the aten or
StableHLO ``op`` when one is to blame, and a message that says what happened, what was
expected and what to do.
"""

from __future__ import annotations

__all__ = [
    "STAGES",
    "CompileError",
    "CaptureError",
    "PrepareError",
    "LoweringError",
    "NeuronCompileError",
    "ExecuteError",
    "WorkerCrash",
    "WorkerTimeout",
]

STAGES = ("capture", "prepare", "lower", "neuronc", "execute", "worker")


class CompileError(RuntimeError):
    """Base class of all compile-path failures.

    Attributes:
        stage: one of :data:`STAGES`.
        op: the aten / StableHLO op name to blame, or None.
        reason: short machine-countable string (``"no-lowering"``, ``"worker-crashed"``...).
        detail: the original, possibly long, message of the underlying failure.
    """

    default_stage = "capture"

    def __init__(
        self,
        message: str,
        *,
        stage: str | None = None,
        op: str | None = None,
        reason: str = "unknown",
        detail: str | None = None,
    ) -> None:
        stage = stage or self.default_stage
        if stage not in STAGES:
            raise ValueError(f"unknown compile stage {stage!r}; expected one of {STAGES}")
        self.stage = stage
        self.op = op
        self.reason = reason
        self.detail = detail
        where = f" [{stage}" + (f", op={op}" if op else "") + f", reason={reason}]"
        super().__init__(message + where)

    def __reduce__(self):  # keep fields when the error crosses the worker boundary
        return (_rebuild, (type(self), self._message(), self.stage, self.op, self.reason,
                           self.detail))

    def _message(self) -> str:
        text = str(self.args[0]) if self.args else ""
        cut = text.rfind(" [")
        return text[:cut] if cut >= 0 else text


def _rebuild(cls, message, stage, op, reason, detail):  # pragma: no cover - pickling glue
    return cls(message, stage=stage, op=op, reason=reason, detail=detail)


class CaptureError(CompileError):
    """The program could not be captured as an FX graph."""

    default_stage = "capture"


class PrepareError(CompileError):
    """Functionalize / decompose / random-op legalization / clean-up failed."""

    default_stage = "prepare"


class LoweringError(CompileError):
    """Torch-MLIR could not import or legalize the graph to StableHLO."""

    default_stage = "lower"


class NeuronCompileError(CompileError):
    """The (simulated) Neuron compiler rejected the StableHLO module."""

    default_stage = "neuronc"


class ExecuteError(CompileError):
    """Running a compiled executable failed."""

    default_stage = "execute"


class WorkerCrash(CompileError):
    """The compile worker process died (segfault, abort, OOM kill)."""

    default_stage = "worker"


class WorkerTimeout(CompileError):
    """The compile worker did not answer in time; it was killed and will be restarted."""

    default_stage = "worker"
