"""Fixtures for the cache tests: a store in a private folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchneuron.cache import CacheStore


@pytest.fixture
def cache_root(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def store(cache_root: Path) -> CacheStore:
    return CacheStore(cache_root, max_bytes=10**8, memory_bytes=10**7)
