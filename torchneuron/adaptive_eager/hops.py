"""``torch.cond`` and ``while_loop`` under adaptive eager: a boundary, then plain eager.

Why: which branch runs, and how often a loop turns, depends on a value read from the
device: a host sync, the same boundary as ``.item()``. Eager ``torch.cond`` first runs
itself through Dynamo and then reaches dispatch modes as one higher-order op, which a
mode must have a rule for ("no rule registered for HigherOrderOperator cond"); tracing it
with a mode on the stack also left Dynamo's caches unable to trace a later ``cond`` with
gradients, even after ``disable()``. So, while adaptive eager is on, ``torch.cond`` is
wrapped: the segment (and any replay, its deferred prefix run first) ends, and ``cond``
runs with the mode stood aside, exactly as plain eager runs it, gradients included.

``while_loop`` (no ``torch`` attribute to wrap) and a ``cond`` bound before ``enable()``
reach the mode as higher-order ops: a rule there does the same, without gradients.
Dynamo refuses to start while FX traces (``error_on_nested_fx_trace``), and FX's flag is
process-wide, so a region compiling in the background thread made those fail at
random; the check is off while adaptive eager is on, and restored by ``disable()``.
Every eager higher-order op also saves and restores that flag around its trace, and
``cond``'s backward traces again: while adaptive eager is on, both run under
``fx_trace.TRACE_LOCK`` (``_set_compilation_env`` and ``materialize_as_graph`` are
wrapped), so no background trace interleaves and leaves the flag set.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Iterator
from typing import Any

import torch
from torch._higher_order_ops.cond import cond_op
from torch._higher_order_ops.while_loop import while_loop_op
from torch.utils._python_dispatch import _disable_current_modes

from torchneuron.compiler.prepare.trace_lock import TRACE_LOCK

__all__ = ["install", "uninstall"]

_saved: dict[str, Any] = {}


def _wrap_cond(original: Any, runtime: Any) -> Any:
    @functools.wraps(original)
    def cond(pred: Any, true_fn: Any, false_fn: Any, operands: Any = ()) -> Any:
        if torch.compiler.is_compiling():  # inside torch.compile: Dynamo's own cond
            return original(pred, true_fn, false_fn, operands)
        runtime.on_sync(runtime.index, "cond")
        with _disable_current_modes(), TRACE_LOCK:  # cond traces its branches
            return original(pred, true_fn, false_fn, operands)

    cond.__torchneuron_original__ = original  # type: ignore[attr-defined]
    return cond


def _eager_after_sync(hop: Any) -> Any:
    import torch._dynamo  # eager ``cond`` runs under Dynamo, which must not trace this

    @torch._dynamo.disable
    def rule(mode: Any, *args: Any, **kwargs: Any) -> Any:
        runtime = mode.runtime
        runtime.on_sync(runtime.index, hop.name())
        with TRACE_LOCK:  # the higher-order op traces its functions
            return hop(*args, **kwargs)  # the mode is popped while its rule runs

    return rule


def _tracing_functions() -> list[tuple[Any, str]]:
    """(module, name) of the functions through which higher-order ops trace on the main
    thread outside any wrapper of ours: ``materialize_as_graph`` (``cond``'s backward
    traces its gradient functions when ``loss.backward()`` runs) and
    ``_set_compilation_env`` (every eager ``cond``/``while_loop``/``scan``, however the
    user imported it, saves FX's flag there and puts the saved value back)."""
    # by module name: ``torch._higher_order_ops.cond`` as an attribute is the function
    names = ("utils", "cond", "while_loop")
    modules = [importlib.import_module(f"torch._higher_order_ops.{n}") for n in names]
    return [(m, f) for m in modules for f in ("materialize_as_graph", "_set_compilation_env")
            if hasattr(m, f)]


def _locked(fn: Any) -> Any:
    @functools.wraps(fn)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with TRACE_LOCK:
            return fn(*args, **kwargs)

    return locked


def _locked_context(fn: Any) -> Any:
    @functools.wraps(fn)
    @contextlib.contextmanager
    def locked(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with TRACE_LOCK, fn(*args, **kwargs) as value:
            yield value

    return locked


def install(mode_class: type, runtime: Any) -> None:
    """Wrap ``torch.cond`` and register the mode's rules (idempotent)."""
    import torch._dynamo

    for hop in (cond_op, while_loop_op):
        if mode_class not in hop.python_key_table:
            hop.py_impl(mode_class)(_eager_after_sync(hop))
    if not _saved:
        _saved["cond"] = torch.cond
        _saved["nested"] = torch._dynamo.config.error_on_nested_fx_trace
        torch.cond = _wrap_cond(torch.cond, runtime)
        torch._dynamo.config.error_on_nested_fx_trace = False
        _saved["tracing"] = [(m, f, getattr(m, f)) for m, f in _tracing_functions()]
        for m, f, fn in _saved["tracing"]:
            setattr(m, f, _locked_context(fn) if f == "_set_compilation_env" else _locked(fn))


def uninstall() -> None:
    """Put back what ``install`` changed."""
    if _saved:
        import torch._dynamo

        torch.cond = _saved.pop("cond")
        torch._dynamo.config.error_on_nested_fx_trace = _saved.pop("nested")
        for m, f, fn in _saved.pop("tracing"):
            setattr(m, f, fn)
