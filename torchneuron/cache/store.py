"""The two tiers together: what ``compile_graph`` is handed as its ``ExecutableStore``.

``load`` looks in memory, then on disk (verified; a hit is promoted to memory and
marks the entry used); ``save`` writes both; ``resolve``/``link`` keep the graph-key
index the same way. Every outcome is counted (``stats()``), per process and, through
``counters.py``, across processes. ``default_store()`` is the store built from the
settings (``None`` when ``TORCHNEURON_CACHE=0``), rebuilt when they change.
"""

from __future__ import annotations

import atexit
import json
import threading
from pathlib import Path
from typing import Any

from torchneuron.cache import config
from torchneuron.cache import entry as entry_format
from torchneuron.cache.counters import EVENTS, Counters, read_totals
from torchneuron.cache.disk import DiskStore
from torchneuron.cache.inventory import current_versions
from torchneuron.cache.lru import MemoryLRU
from torchneuron.hardware import state

__all__ = ["CacheStore", "default_store", "default_store_stats", "reset_default_store"]

_MAX_MESSAGE = 4000  # characters of a failure's message kept (its reason and op are whole)


class CacheStore:
    """In-process LRU over an on-disk store at ``root`` (see the package docstring)."""

    def __init__(self, root: str | Path, *, max_bytes: int | None = None,
                 memory_bytes: int | None = None) -> None:
        self.counters = Counters(None)
        self.memory = MemoryLRU(config.memory_size() if memory_bytes is None else memory_bytes)
        self.disk = DiskStore(Path(root), config.max_size() if max_bytes is None else max_bytes,
                              self.counters)
        atexit.register(self.counters.flush)

    @property
    def root(self) -> Path:
        return self.disk.root

    # -- the ExecutableStore protocol ---------------------------------------------------

    def load(self, key: str) -> bytes | None:
        data = self.memory.get(key)
        if data is not None:
            self._count("hits", "memory_hits")
            return data
        got = self.disk.read("executable", key)
        if got is None:
            self._count("misses")
            return None
        self.memory.put(key, got.payload)
        self.disk.touch(key)
        self._count("hits", "disk_hits")
        return got.payload

    def save(self, key: str, data: bytes, meta: dict[str, Any]) -> None:
        self.memory.put(key, data)
        self.disk.write("executable", key, data, meta)

    def resolve(self, graph_key: str) -> str | None:
        key = self.memory.resolve(graph_key)
        if key is None:
            got = self.disk.read("link", graph_key)
            key = got.payload.decode("ascii") if got is not None else None
            if key is not None and self.memory.get(key) is None and \
                    not self.disk.exists("executable", key):
                self._drop_link(graph_key)  # its executable was evicted: a clean miss
                key = None
            if key is not None:
                self.memory.link(graph_key, key)
        self._count("link_hits" if key is not None else "link_misses")
        return key

    def link(self, graph_key: str, key: str) -> None:
        self.memory.link(graph_key, key)
        if self.disk.write("link", graph_key, key.encode("ascii"), {"kind": "link"}) and \
                not self.disk.exists("executable", key):
            # Evicted (by another process) before the link landed: an eviction removes
            # the links it sees, and this check removes the one it could not see yet.
            self._drop_link(graph_key)

    def _drop_link(self, graph_key: str) -> None:
        try:
            self.disk.remove_file(self.disk.path("link", graph_key))
        except OSError:
            pass  # read-only: the link stays a miss

    def failure(self, graph_key: str) -> dict[str, Any] | None:
        """The record of ``graph_key``'s failed compile (an earlier process's or this
        one's), or None: never compiled, compiled, or ``TORCHNEURON_CACHE_RETRY_FAILED``."""
        if config.retry_failed():
            return None
        record = self.memory.failure(graph_key)
        if record is None:
            got = self.disk.read("failure", graph_key)  # (verified: ``entry.decode``)
            record = entry_format.failure_record(got.payload) if got is not None else None
            if record is not None:
                self.memory.remember_failure(graph_key, record)
        if record is not None:
            self._count("failure_hits")
        return record

    def remember_failure(self, graph_key: str, record: dict[str, Any]) -> None:
        """Keep ``record`` (``entry.FAILURE_FIELDS``) of ``graph_key``'s failed compile, so
        this and later processes do not compile the graph again (Neuron's compile cache
        keeps failed compiles too). ``meta``: the versions, as an executable's."""
        record = {k: record.get(k) for k in entry_format.FAILURE_FIELDS}
        record["message"] = str(record["message"] or "")[:_MAX_MESSAGE]
        self.memory.remember_failure(graph_key, record)
        meta = {"kind": "failure", "stage": record["stage"], "reason": record["reason"],
                "components": current_versions()}
        self.disk.write("failure", graph_key,
                        json.dumps(record, sort_keys=True).encode("utf-8"), meta)

    def forget_failure(self, graph_key: str) -> None:
        """``graph_key`` compiled after all (a retry): its failure is not kept."""
        self.memory.forget_failure(graph_key)
        if self.disk.exists("failure", graph_key):
            try:
                self.disk.remove_file(self.disk.path("failure", graph_key))
            except OSError:
                pass

    def discard(self, key: str) -> None:
        """Forget the executable under ``key`` in both tiers: the compiler found its bytes
        unusable (content that does not match its key, an op the interpreter lacks)."""
        self.memory.discard(key)
        self.counters.add("corrupt")
        try:
            self.disk.remove_file(self.disk.path("executable", key))
        except OSError:
            pass

    # -- observability ---------------------------------------------------------------

    def _count(self, *events: str) -> None:
        for e in events:
            self.counters.add(e)

    def stats(self) -> dict[str, Any]:
        """This process's counts, the totals over all processes, and the tiers' state."""
        self.counters.flush()
        here = {e: self.counters.counts.get(e, 0) for e in EVENTS}
        return {
            "dir": str(self.root),
            "process": here,
            "persisted": read_totals(self.disk.base / "stats"),
            "memory": {"entries": len(self.memory), "bytes": self.memory.bytes_used,
                       "max_bytes": self.memory.max_bytes},
            "disk": {"writable": self.disk.writable, "max_bytes": self.disk.max_bytes},
        }

    def flush(self) -> None:
        self.counters.flush()


_lock = threading.Lock()
_default: tuple[tuple[Any, ...], CacheStore | None] | None = None


def default_store() -> CacheStore | None:
    """The store configured by the settings (None if ``TORCHNEURON_CACHE=0``)."""
    global _default
    config_now = (config.enabled(), str(config.cache_dir()), config.max_size(),
                  config.memory_size())
    with _lock:
        if _default is None or _default[0] != config_now:
            store = CacheStore(config_now[1], max_bytes=config_now[2],
                               memory_bytes=config_now[3]) if config_now[0] else None
            if _default is not None and _default[1] is not None:
                _default[1].flush()
            _default = (config_now, store)
        return _default[1]


def default_store_stats() -> dict[str, Any]:
    """Counts of the default store if one was built ({} otherwise, or when the cache is
    off); never builds one (``torchneuron.stats()`` must not create a cache folder)."""
    with _lock:
        store = _default[1] if _default is not None else None
    return {} if store is None else store.stats()


def reset_default_store() -> None:
    """Forget the default store (tests, benchmarks): the next call builds a fresh one."""
    global _default
    with _lock:
        if _default is not None and _default[1] is not None:
            _default[1].flush()
        _default = None


# The cache's section of torchneuron.reset() / torchneuron.stats().
state.register("cache", reset=reset_default_store, stats=default_store_stats)
