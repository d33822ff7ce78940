"""``torch.cond`` and ``while_loop`` under adaptive eager: a boundary, then eager.

Why: a higher-order op reaches a dispatch mode as one call with Python callables in it,
and PyTorch refuses it unless the mode has a rule for it ("no rule registered for
HigherOrderOperator cond"), so every ``torch.cond`` failed once adaptive eager was
enabled. Which branch runs, and how often a loop turns, depends on a value read from the
device: that is a host sync, the same boundary as ``.item()``. The rule ends the
segment (and any replay, its deferred prefix run first) and runs the op as plain eager
does, the mode stood aside, so the branches' ops are neither recorded nor deferred.
"""

from __future__ import annotations

from typing import Any

from torch._higher_order_ops.cond import cond_op
from torch._higher_order_ops.while_loop import while_loop_op

__all__ = ["install"]


def _eager_after_sync(hop: Any) -> Any:
    import torch._dynamo  # eager ``cond`` runs under Dynamo, which must not trace this

    @torch._dynamo.disable
    def rule(mode: Any, *args: Any, **kwargs: Any) -> Any:
        runtime = mode.runtime
        runtime.on_sync(runtime.index, hop.name())
        return hop(*args, **kwargs)  # the mode is popped while its rule runs

    return rule


def install(mode_class: type) -> None:
    """Register the rules for ``mode_class`` (idempotent).

    Eager ``cond`` / ``while_loop`` first run themselves through Dynamo, which refuses
    to start while FX traces ("Detected that you are using FX to symbolically trace a
    dynamo-optimized function"), and FX's tracing flag is process-wide: a region
    compiling in the background thread made the user's ``cond`` fail at random. With
    ``error_on_nested_fx_trace`` off, Dynamo then calls the function as it is, which
    reaches the rule below just the same."""
    import torch._dynamo

    torch._dynamo.config.error_on_nested_fx_trace = False
    for hop in (cond_op, while_loop_op):
        if mode_class not in hop.python_key_table:
            hop.py_impl(mode_class)(_eager_after_sync(hop))
