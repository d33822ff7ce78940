"""Hit, miss, write, eviction and error counts, persisted across processes.

Each process keeps its own counts in memory and writes them (atomically: temp file and
rename) to its own file under ``stats/``; readers sum the files. No file is shared for
writing, so no lock is needed and a crashed process loses at most its unflushed counts.
When the files pile up, a process folds them into one: it claims each file by renaming
it (only one process can win a rename), writes the sum as a new file, then deletes what
it claimed. ``zero`` removes them all. No symlink in ``stats/`` (or at it) is followed,
and count files are read bounded in size and depth: a planted file is ignored.
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

from torchneuron.cache import bounded_json, safe_fs

__all__ = ["Counters", "EVENTS", "read_totals", "zero"]

EVENTS = ("hits", "memory_hits", "disk_hits", "misses", "writes", "evictions", "errors",
          "corrupt", "link_hits", "link_misses", "failure_hits")
_FOLD_ABOVE = 64
_FLUSH_EVERY_S = 2.0
_MAX_FILE = 1 << 16


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
            if len(_count_files(self.folder)) > _FOLD_ABOVE:
                _fold(self.folder, self._name)
        except OSError:
            pass


def _write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(mode=0o700)  # recreated after a concurrent clear
    except FileExistsError:
        pass
    safe_fs.check_dir(path.parent)
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read(path: Path) -> Counter[str]:
    try:
        raw = bounded_json.loads(safe_fs.read_file(path.parent, path, _MAX_FILE),
                                 max_bytes=_MAX_FILE)
    except (OSError, ValueError):
        return Counter()
    if not isinstance(raw, dict):
        return Counter()
    return Counter({k: v for k, v in raw.items()
                    if k in EVENTS and type(v) is int and 0 <= v < 1 << 62})


def _count_files(folder: Path) -> list[Path]:
    """The count files in ``folder`` (a real directory; symlinks in it are skipped)."""
    return [Path(e.path) for e in safe_fs.scan(folder)
            if e.name.endswith(".json") and e.is_file(follow_symlinks=False)]


def _fold(folder: Path, own: str) -> None:
    claimed = []
    for p in _count_files(folder):
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
    for p in _count_files(folder):
        total.update(_read(p))
    return {e: total.get(e, 0) for e in EVENTS}


def zero(folder: Path) -> list[tuple[Path, str]]:
    """Forget all persisted counts; (path, why) of each file that could not be removed.
    Removing a symlink removes the link, never its target; a ``folder`` that is itself
    a symlink is left alone."""
    failed = []
    for e in safe_fs.scan(folder):
        if e.is_dir(follow_symlinks=False):
            continue
        try:
            os.unlink(e.path)
        except FileNotFoundError:
            pass
        except OSError as err:
            failed.append((Path(e.path), err.strerror or str(err)))
    return failed
