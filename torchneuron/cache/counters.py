"""Hit, miss, write, eviction and error counts, persisted across processes.

Each process keeps its own counts in memory and writes them (atomically: temp file and
rename) to its own file under ``stats/``; readers sum the files. No file is shared for
writing, so no lock is needed and a crashed process loses at most its unflushed counts.
When the files pile up, a process folds them into one: it claims each file by renaming
it (only one process can win a rename), writes the sum as a new file, then deletes what
it claimed. ``zero`` removes them all.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

__all__ = ["Counters", "EVENTS", "read_totals", "zero"]

EVENTS = ("hits", "memory_hits", "disk_hits", "misses", "writes", "evictions", "errors",
          "corrupt", "link_hits", "link_misses")
_FOLD_ABOVE = 64
_FLUSH_EVERY_S = 2.0


class Counters:
    """This process's counts (``counts``) and where they are persisted (``folder``)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
        self._last_flush = 0.0
        self._dirty = False

    def add(self, event: str, n: int = 1) -> None:
        with self._lock:
            self.counts[event] += n
            self._dirty = True
        if time.monotonic() - self._last_flush > _FLUSH_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Write this process's counts to its file (never raises: stats are best effort)."""
        if self.folder is None or not self._dirty:
            return
        with self._lock:
            data = json.dumps(dict(self.counts), sort_keys=True).encode()
            self._dirty = False
            self._last_flush = time.monotonic()
        try:
            _write(self.folder / self._name, data)
            if len(list(self.folder.glob("*.json"))) > _FOLD_ABOVE:
                _fold(self.folder, self._name)
        except OSError:
            pass


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read(path: Path) -> Counter[str]:
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return Counter()
    if not isinstance(raw, dict):
        return Counter()
    return Counter({k: v for k, v in raw.items() if k in EVENTS and isinstance(v, int)})


def _fold(folder: Path, own: str) -> None:
    claimed = []
    for p in folder.glob("*.json"):
        if p.name == own:
            continue
        mine = p.with_name(f".claimed-{uuid.uuid4().hex}")
        try:
            os.rename(p, mine)
        except OSError:
            continue  # another process claimed it first
        claimed.append(mine)
    total: Counter[str] = Counter()
    for p in claimed:
        total.update(_read(p))
    _write(folder / f"folded-{uuid.uuid4().hex}.json", json.dumps(dict(total)).encode())
    for p in claimed:
        p.unlink(missing_ok=True)


def read_totals(folder: Path) -> dict[str, int]:
    """Counts summed over every process that used the cache at ``folder``."""
    total: Counter[str] = Counter()
    for p in folder.glob("*.json") if folder.is_dir() else ():
        total.update(_read(p))
    return {e: total.get(e, 0) for e in EVENTS}


def zero(folder: Path) -> None:
    """Forget all persisted counts."""
    for p in folder.glob("*") if folder.is_dir() else ():
        p.unlink(missing_ok=True)
