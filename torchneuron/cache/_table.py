"""Plain-text tables and value parsers for the CLI (sizes, ages, filters)."""

from __future__ import annotations

import operator
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from torchneuron.cache.config import parse_size

__all__ = ["table", "parse_age", "parse_filter"]

_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge, "<=": operator.le, "!=": operator.ne, "=": operator.eq,
    ">": operator.gt, "<": operator.lt, "~": lambda a, b: str(b).lower() in str(a).lower(),
}
_FILTER = re.compile(r"\s*([a-z_]+)\s*(>=|<=|!=|=|>|<|~)\s*(.*?)\s*$")
_SIZE_FIELDS = {"size"}
_AGE_FIELDS = {"age": "created", "idle": "used"}
_INT_FIELDS = {"hits", "format_version"}


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, numbers right-aligned, two spaces apart."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(_numberish(r[i]) for r in cells) and cells for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers)] + [line(r) for r in cells])


def _numberish(s: str) -> bool:
    return bool(re.fullmatch(r"[\d.,]+( [kMGT]?B)?", s))


def parse_age(text: str) -> float:
    """``"7d"`` -> seconds. Units: s, m, h, d, w."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not m:
        raise ValueError(f"cannot read age {text!r}; expected e.g. 30m, 12h, 7d, 2w")
    return float(m.group(1)) * _AGE_UNITS[m.group(2) or "s"]


def parse_filter(expr: str) -> Callable[[dict[str, Any]], bool]:
    """``FIELD OP VALUE`` over an entry's JSON row: ``size>1MB``, ``target=trn2``,
    ``name~forward``, ``hits=0``, ``age>7d`` (since created), ``idle>1d`` (since used),
    ``compatible=false``. OP is one of = != < > <= >= ~ (contains)."""
    m = _FILTER.fullmatch(expr)
    if not m:
        raise ValueError(f"cannot read filter {expr!r}; expected FIELD OP VALUE, e.g. size>1MB")
    field_name, op_text, raw = m.groups()
    op = _OPS[op_text]
    value: Any
    if field_name in _SIZE_FIELDS:
        value = parse_size(raw)
    elif field_name in _AGE_FIELDS:
        value = parse_age(raw)
    elif field_name in _INT_FIELDS:
        value = int(raw)
    elif field_name == "compatible":
        value = raw.lower() in ("1", "true", "yes")
    else:
        value = raw

    def keep(row: dict[str, Any]) -> bool:
        if field_name in _AGE_FIELDS:
            got: Any = time.time() - row[_AGE_FIELDS[field_name]]
        elif field_name not in row:
            raise ValueError(f"unknown filter field {field_name!r}; valid: "
                             + ", ".join(sorted(set(row) | set(_AGE_FIELDS))))
        else:
            got = row[field_name]
        if got is None:
            return op_text == "!="
        if op_text != "~" and isinstance(value, str):
            got = str(got)
        return bool(op(got, value))

    return keep
