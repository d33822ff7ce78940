"""One owner per overload: how a decomposition module files its entries.

Each family module owns a dict from aten overloads to the functions that rewrite them
(``_register = registrar(TABLE)``), and ``table.decomposition_table`` merges the families
in one layer. Which definition wins must never depend on the order of that merge, so an
overload may be filed once in the whole process: a second registration raises
``DuplicateDecomposition`` when its module is imported (``owners`` checks the same for
tables written as dict literals, when the table is built). ``Lowering`` is the
per-thread flag a decomposition sets while it calls the op it rewrites, so that inner
call takes the op's own lowering instead of the decomposition again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

__all__ = ["registrar", "owners", "Lowering", "DuplicateDecomposition"]

Decomposition = Callable[..., Any]


class DuplicateDecomposition(RuntimeError):
    """An overload was given a second decomposition (one owner per overload)."""


def _name(fn: Any) -> str:
    """``module.qualname:line``: the line tells two lambdas of one module apart."""
    fn = getattr(fn, "func", fn)  # a functools.partial names its function
    code = getattr(fn, "__code__", None)
    line = f":{code.co_firstlineno}" if code is not None else ""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}{line}"


# overload -> "module.qualname" of the one function filed for it in this process
_FILED: dict[Any, str] = {}


def _claim(filed: dict[Any, str], op: Any, fn: Decomposition) -> None:
    name = _name(fn)
    prior = filed.get(op)
    if prior is not None and prior != name:  # (the same name again: a module reloaded)
        raise DuplicateDecomposition(
            f"{op} is decomposed twice: by {prior} and by {name}. Each overload has one "
            "owner; keep the definition that should win and delete the other (or make "
            "it a helper the owner calls).")
    filed[op] = name


def registrar(table: dict[Any, Decomposition], *, filed: dict[Any, str] | None = None
              ) -> Callable[..., Callable[[Decomposition], Decomposition]]:
    """A decorator factory: ``@register(op, ...)`` files the function in ``table`` under
    each op and returns it unchanged; an op filed before (in any module) raises
    ``DuplicateDecomposition``. ``filed`` is the record of owners the table shares: the
    process-wide one for the families' tables (the default), a layer's own for the tables
    of a layer that wraps the families' entries (complex values), or a test's."""
    record = _FILED if filed is None else filed

    def register(*ops: Any) -> Callable[[Decomposition], Decomposition]:
        def wrap(fn: Decomposition) -> Decomposition:
            for op in ops:
                _claim(record, op, fn)
                table[op] = fn
            return fn

        return wrap

    return register


def owners(families: Iterable[Mapping[Any, Decomposition]]) -> dict[Any, Decomposition]:
    """The families merged into one table; an overload in two of them raises
    ``DuplicateDecomposition`` naming both functions."""
    merged: dict[Any, Decomposition] = {}
    for family in families:
        for op, fn in family.items():
            if op in merged and merged[op] is not fn:
                raise DuplicateDecomposition(
                    f"{op} is decomposed twice: by {_name(merged[op])} and by {_name(fn)}. "
                    "Each overload has one owner; keep the definition that should win and "
                    "delete the other.")
            merged[op] = fn
    return merged


class Lowering:
    """Set while this thread lowers an op through its own lowering (``with flag.inside():``);
    the op's decomposition returns NotImplemented while ``flag.active``.

    Per thread: adaptive eager compiles in a background thread, and a process-wide flag
    would hand that thread's trace the inner lowering too. The previous value comes
    back on exit, so the flag nests."""

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def active(self) -> bool:
        return getattr(self._local, "on", False)

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        prior = self.active
        self._local.on = True
        try:
            yield
        finally:
            self._local.on = prior
