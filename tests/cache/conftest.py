"""Helpers for the cache tests: a store in a private folder and fake executables."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from torchneuron.cache import CacheStore


def fake_key(i: int | str) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def fake_exe(i: int | str, size: int = 1000) -> bytes:
    """JSON that looks like an executable to the cache (the compiler is not involved)."""
    body = {"magic": "torchneuron-executable", "i": str(i), "pad": "x" * size}
    return json.dumps(body, sort_keys=True).encode()


@pytest.fixture
def cache_root(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def store(cache_root: Path) -> CacheStore:
    return CacheStore(cache_root, max_bytes=10**8, memory_bytes=10**7)
