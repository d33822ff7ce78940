"""What the layers above dispatch need to know about an aten op, read once per overload.

Eager dispatch, the adaptive-eager recorder and its guards all ask the same questions of
an op: its tracked name, which arguments it writes, whether it hands tensor-derived
values to the host (a read, so a sync point), whether it draws random numbers, and the
signature an eager NEFF is compiled for. The answers come from the op's schema and tags,
computed once per overload and cached, so no caller re-parses a schema per call.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["OpFacts", "op_facts", "eager_signature"]

_HOST_VALUE_TYPES = ("number", "Scalar", "bool", "int", "float", "complex", "SymInt", "SymFloat")


@dataclass(frozen=True)
class OpFacts:
    """What dispatch needs to know about an op, read once from its schema and tags."""

    name: str  # tracked name: "add_" stays "add_"
    qualname: str  # printable overload, e.g. "aten.mm.default"
    written: tuple[tuple[int, str], ...]  # (position, name) of arguments it writes
    returns_host_values: bool  # hands tensor-derived Python values to the host: a read
    random: bool  # draws from a generator (runs under the device's RNG state)
    returns_tensors_only: bool  # every return is a Tensor, Tensor?, Tensor[] (or nothing)


@functools.cache
def op_facts(func: Any) -> OpFacts:
    """The cached facts of aten overload ``func``."""
    schema = getattr(func, "_schema", None)
    arguments = schema.arguments if schema is not None else ()
    returns = schema.returns if schema is not None else ()
    return OpFacts(
        name=func.__name__.split(".")[0] if hasattr(func, "__name__") else str(func),
        qualname=str(func),
        written=tuple(
            (i, a.name) for i, a in enumerate(arguments)
            if a.alias_info is not None and a.alias_info.is_write
        ),  # fmt: skip
        returns_host_values=any(str(r.type) in _HOST_VALUE_TYPES for r in returns),
        random=torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()),
        returns_tensors_only=schema is not None and all(
            str(r.type).startswith("Tensor") for r in returns
        ),
    )


def eager_signature(name: str, tensors: list[torch.Tensor]) -> tuple:
    """The key an eager NEFF is compiled for: op name, shapes and dtypes of its tensors."""
    return (name, tuple((tuple(t.shape), str(t.dtype)) for t in tensors))
