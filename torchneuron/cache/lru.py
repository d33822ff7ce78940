"""Tier 1: an in-process LRU of executable bytes, bounded in bytes (cachetools).

It saves the disk read and checksum on repeated loads in one process (a re-traced
graph after ``torch._dynamo.reset()``, many identical regions under adaptive eager)
and keeps graph-key links and failed compiles found so far. Thread-safe: adaptive eager compiles in the
background.
"""

from __future__ import annotations

import threading

from cachetools import LRUCache

__all__ = ["MemoryLRU"]


class MemoryLRU:
    """key -> bytes, least recently used evicted first once ``max_bytes`` is exceeded."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._data: LRUCache[str, bytes] = LRUCache(maxsize=max(max_bytes, 1), getsizeof=len)
        self._links: LRUCache[str, str] = LRUCache(maxsize=65536)
        self._failures: LRUCache[str, dict] = LRUCache(maxsize=4096)
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            return self._data.get(key)

    def put(self, key: str, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return  # larger than the whole tier: keep it on disk only
        with self._lock:
            self._data[key] = data

    def discard(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)

    def resolve(self, graph_key: str) -> str | None:
        with self._lock:
            return self._links.get(graph_key)

    def link(self, graph_key: str, key: str) -> None:
        with self._lock:
            self._links[graph_key] = key

    def failure(self, graph_key: str) -> dict | None:
        with self._lock:
            return self._failures.get(graph_key)

    def remember_failure(self, graph_key: str, record: dict) -> None:
        with self._lock:
            self._failures[graph_key] = record

    def forget_failure(self, graph_key: str) -> None:
        with self._lock:
            self._failures.pop(graph_key, None)

    @property
    def bytes_used(self) -> int:
        with self._lock:
            return int(self._data.currsize)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._links.clear()
            self._failures.clear()
