"""JSON from the cache directory, parsed with its size and nesting depth bounded.

Why: every file in the cache may be hostile, and ``json.loads`` of a few kilobytes of
``[[[[...`` raises ``RecursionError`` (or exhausts the stack of whatever walks the
result). The depth is measured before parsing, on the text with its strings removed:
each pass deletes the innermost ``[]`` and ``{}`` pairs, so the number of passes is the
depth, all of it in C regex code.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["loads", "MAX_DEPTH"]

MAX_DEPTH = 64
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_PAIR = re.compile(rb"\[\]|\{\}")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def depth(data: bytes, limit: int) -> int:
    """Nesting depth of the JSON text ``data``, or ``limit + 1`` if deeper than ``limit``."""
    s = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    for d in range(limit + 1):
        if not s:
            return d
        shorter = _PAIR.sub(b"", s)
        if shorter == s:  # unbalanced (json.loads refuses it): bound what is left
            return min(d + len(s), limit + 1)
        s = shorter
    return limit + 1


def loads(data: bytes | str, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` refusing (``ValueError``) text longer than ``max_bytes`` or nested
    deeper than ``max_depth``."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if len(raw) > max_bytes:
        raise ValueError(f"JSON of {len(raw)} bytes, more than the {max_bytes} allowed")
    if depth(raw, max_depth) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(raw)
    except RecursionError:  # (not reached after the depth check; kept as a last guard)
        raise ValueError("JSON nested too deeply") from None
