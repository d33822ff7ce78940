"""Fake cache entries for the cache tests (the compiler is not involved)."""

from __future__ import annotations

import hashlib
import json


def fake_key(i: object) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def fake_exe(i: object, size: int = 1000) -> bytes:
    """JSON that looks like an executable to the cache."""
    body = {"magic": "torchneuron-executable", "i": str(i), "pad": "x" * size}
    return json.dumps(body, sort_keys=True).encode()
