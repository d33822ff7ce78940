"""Tier 2: the on-disk store shared by processes.

Layout under the cache directory (created user-only, 0700)::

    CACHEDIR.TAG                  marks the folder as a cache for backup tools
    v1/exe/ab/<key>               executables (entry.py format), "used" time = mtime
    v1/exe/ab/<key>.hits          one byte appended per hit (size = hit count)
    v1/index/cd/<graph key>       links graph key -> executable key
    v1/stats/*.json               per-process counts (counters.py)

Why it is safe without locks: an entry is written to a temporary file in the same
folder, fsynced, and renamed over the final name, so readers see a whole old file, a
whole new file or nothing; two writers of one key write the same bytes and the last
rename wins. A writer killed mid-write leaves only a ``.tmp-*`` file, which no reader
opens (``verify --fix`` and ``prune`` delete stale ones). Every read is verified
(``entry.decode``); a bad file is a counted miss and is removed. The store version is
in the path and in every header, so a format change makes old entries unreachable.

Failure to write (full disk, read-only directory, permissions) becomes one warning and
no further disk writes in this process: never a crash.
"""

from __future__ import annotations

import errno
import os
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torchneuron.cache import entry as entry_format
from torchneuron.cache.counters import Counters
from torchneuron.cache.entry import STORE_VERSION, Entry, EntryError

__all__ = ["DiskStore"]

_TAG = b"Signature: 8a477f597d28d172789f06886806bc55\n# torchneuron compile cache\n"
_STALE_TMP_S = 3600.0


class DiskStore:
    """Entries on disk under ``root``, bounded to ``max_bytes`` by LRU eviction."""

    def __init__(self, root: Path, max_bytes: int, counters: Counters | None = None) -> None:
        self.root = Path(root)
        self.base = self.root / f"v{STORE_VERSION}"
        self.max_bytes = max_bytes
        self.readable = True
        self.writable = True
        self.counters = counters or Counters(None)
        try:
            _make_dir(self.root)
            for sub in ("exe", "index", "stats"):
                _make_dir(self.base / sub)
            tag = self.root / "CACHEDIR.TAG"
            if not tag.exists():
                self._atomic_write(tag, _TAG)
        except OSError as e:
            self._give_up_writing(e)
            self.readable = self.base.is_dir()
        self.counters.folder = self.base / "stats" if self.writable else None

    # -- paths ----------------------------------------------------------------------

    def path(self, kind: str, key: str) -> Path:
        sub = "exe" if kind == "executable" else "index"
        return self.base / sub / key[:2] / key

    # -- reading -----------------------------------------------------------------------

    def read(self, kind: str, key: str) -> Entry | None:
        """The verified entry, or None. A bad file is counted, warned about and removed."""
        if not self.readable:
            return None
        p = self.path(kind, key)
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            self.counters.add("errors")
            warnings.warn(f"torchneuron cache: cannot read {p} ({e}); treating it as a miss",
                          stacklevel=3)
            return None
        try:
            got = entry_format.decode(raw, expect_key=key)
            if got.kind != kind:
                raise EntryError(f"a {got.kind} entry where a {kind} was expected")
        except EntryError as e:
            self.counters.add("corrupt")
            warnings.warn(f"torchneuron cache: removed bad entry {p.name[:12]} ({e}); it "
                          "will be rebuilt", stacklevel=3)
            self.remove_file(p)
            return None
        return got

    def touch(self, key: str) -> None:
        """Mark an executable used now (LRU order) and count a hit on it."""
        if not self.writable:
            return
        p = self.path("executable", key)
        try:
            os.utime(p)
            fd = os.open(f"{p}.hits", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, b"+")
            finally:
                os.close(fd)
        except OSError:
            pass  # evicted meanwhile, or read-only: hits are statistics only

    # -- writing -----------------------------------------------------------------------

    def write(self, kind: str, key: str, payload: bytes, meta: dict[str, Any]) -> bool:
        """Atomically write one entry; False (and a warning, once) if the disk refuses."""
        if not self.writable:
            return False
        data = entry_format.encode(kind, key, payload, meta)
        p = self.path(kind, key)
        try:
            _make_dir(p.parent)
            self._atomic_write(p, data)
        except OSError as e:
            self._give_up_writing(e)
            return False
        self.counters.add("writes")
        if kind == "executable":
            self.evict()
        return True

    def _atomic_write(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(f".tmp-{path.name[:16]}-{uuid.uuid4().hex[:8]}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _give_up_writing(self, e: OSError) -> None:
        self.counters.add("errors")
        if self.writable:
            why = {errno.ENOSPC: "the disk is full", errno.EROFS: "it is read-only",
                   errno.EACCES: "permission denied", errno.EDQUOT: "disk quota exceeded"}
            reason = why.get(e.errno or 0, str(e))
            warnings.warn(f"torchneuron cache: cannot write to {self.root} ({reason}); "
                          "continuing without saving compiled executables. Free space, fix "
                          "permissions, or set TORCHNEURON_CACHE_DIR elsewhere "
                          "(TORCHNEURON_CACHE=0 turns the cache off).", stacklevel=4)
        self.writable = False
        self.counters.folder = None

    # -- housekeeping ------------------------------------------------------------------

    def files(self) -> Iterator[tuple[str, Path]]:
        """(kind, path) of every entry file (not temporaries or hit counters)."""
        for kind, sub in (("executable", "exe"), ("link", "index")):
            folder = self.base / sub
            if not folder.is_dir():
                continue
            for shard in folder.iterdir():
                if not shard.is_dir():
                    continue
                for p in shard.iterdir():
                    if entry_format.is_key(p.name):
                        yield kind, p

    def temporaries(self) -> Iterator[Path]:
        for sub in ("exe", "index"):
            yield from (self.base / sub).glob("*/.tmp-*")

    def remove_file(self, p: Path) -> int:
        """Delete an entry file and its hit counter; the bytes freed."""
        freed = 0
        for q in (p, Path(f"{p}.hits")):
            try:
                freed += q.stat().st_size
                q.unlink()
            except OSError:
                pass
        return freed

    def usage(self) -> list[tuple[float, int, Path]]:
        """(last used, bytes, path) of every executable, with its hit counter's bytes."""
        rows = []
        for kind, p in self.files():
            try:
                st = p.stat()
                size = st.st_size
                if kind == "executable":
                    hits = Path(f"{p}.hits")
                    size += hits.stat().st_size if hits.exists() else 0
            except OSError:
                continue
            rows.append((st.st_mtime, size, p))
        return rows

    def evict(self, max_bytes: int | None = None) -> int:
        """Remove least recently used executables until the store fits; entries removed."""
        bound = self.max_bytes if max_bytes is None else max_bytes
        rows = self.usage()
        total = sum(size for _, size, _ in rows)
        removed = 0
        for _, size, p in sorted(r for r in rows if r[2].parent.parent.name == "exe"):
            if total <= bound:
                break
            self.remove_file(p)
            total -= size
            removed += 1
        if removed:
            self.counters.add("evictions", removed)
        return removed

    def remove_stale_temporaries(self, older_than_s: float = _STALE_TMP_S) -> int:
        now, n = time.time(), 0
        for p in self.temporaries():
            try:
                if now - p.stat().st_mtime > older_than_s:
                    p.unlink()
                    n += 1
            except OSError:
                pass
        return n


def _make_dir(path: Path) -> None:
    """Create ``path`` and any missing parents user-only (0700, whatever the umask);
    existing folders are left as they are."""
    if path.is_dir():
        return
    missing = [path, *(p for p in path.parents if not p.exists())]
    for p in reversed(missing):
        p.mkdir(mode=0o700, exist_ok=True)
        os.chmod(p, 0o700)
