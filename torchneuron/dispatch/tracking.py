"""Which ops ran on the device and which fell back to the host, with reasons.

The counterparts of TorchNeuron's ``get_executed_ops()`` / ``get_fallback_ops()``.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["executed_ops", "fallback_ops", "fallback_reasons", "reset_op_tracking"]

_executed: Counter[str] = Counter()
_fallback: Counter[str] = Counter()
_fallback_reasons: dict[str, str] = {}


def count_executed(name: str) -> None:
    _executed[name] += 1


def count_fallback(name: str, reason: str) -> None:
    _fallback[name] += 1
    _fallback_reasons.setdefault(name, reason)


def executed_ops() -> dict[str, int]:
    """Ops executed on the simulated NeuronCore, by aten name, with counts."""
    return dict(_executed)


def fallback_ops() -> dict[str, int]:
    """Ops that ran on the host as a CPU fallback, by aten name, with counts."""
    return dict(_fallback)


def fallback_reasons() -> dict[str, str]:
    """Why each fallback op could not run on the device (first reason seen)."""
    return dict(_fallback_reasons)


def reset_op_tracking() -> None:
    _executed.clear()
    _fallback.clear()
    _fallback_reasons.clear()
