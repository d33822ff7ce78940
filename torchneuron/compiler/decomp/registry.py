"""The one way a decomposition module fills its table: ``_register = registrar(TABLE)``.

Each ``decomp_*.py`` module owns a dict from aten ops to the functions that rewrite them
(``decompositions.decomposition_table`` merges them); this builds the decorator that
files a function under several ops at once. ``Lowering`` is the per-thread flag a
decomposition sets while it calls the op it rewrites, so that inner call takes the op's
own lowering instead of the decomposition again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["registrar", "Lowering"]

Decomposition = Callable[..., Any]


def registrar(table: dict[Any, Decomposition]) -> Callable[..., Callable[[Decomposition],
                                                                        Decomposition]]:
    """A decorator factory: ``@register(op, ...)`` files the function in ``table`` under
    each op and returns it unchanged."""

    def register(*ops: Any) -> Callable[[Decomposition], Decomposition]:
        def wrap(fn: Decomposition) -> Decomposition:
            for op in ops:
                table[op] = fn
            return fn

        return wrap

    return register


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
