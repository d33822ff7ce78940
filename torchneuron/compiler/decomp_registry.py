"""The one way a decomposition module fills its table: ``_register = registrar(TABLE)``.

Each ``decomp_*.py`` module owns a dict from aten ops to the functions that rewrite them
(``decompositions.decomposition_table`` merges them); this builds the decorator that
files a function under several ops at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["registrar"]

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
