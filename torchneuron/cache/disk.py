"""Tier 2: the on-disk store shared by processes.

Layout under the cache directory (created user-only, 0700)::

    CACHEDIR.TAG                  marks the folder as a cache for backup tools
    v1/exe/ab/<key>               executables (entry.py format), "used" time = mtime
    v1/exe/ab/<key>.hits          one byte appended per hit (size = hit count)
    v1/index/cd/<graph key>       links graph key -> executable key
    v1/failed/ef/<graph key>      graphs whose compile failed: the stage, reason, op, message
    v1/stats/*.json               per-process counts (counters.py)

Why it is safe without locks: an entry is written to a temporary file in the same
folder, fsynced, and renamed over the final name, so readers see a whole old file, a
whole new file or nothing; two writers of one key write the same bytes and the last
rename wins. A writer killed mid-write leaves only a ``.tmp-*`` file, which no reader
opens (``verify --fix`` and ``prune`` delete stale ones). Every read is verified
(``entry.decode``); a bad file is a counted miss and is removed. The store version is
in the path and in every header, so a format change makes old entries unreachable.

Failure to write (full disk, read-only directory, permissions) becomes one warning and
no further disk writes in this process: never a crash. A folder that vanished (a
concurrent ``clear`` or ``rm -rf``) is recreated on the next write.

Hostile contents (``safe_fs.py``): no symlink in the directory is followed, and a
directory that others can write, or that another user owns, is refused at first use
(one warning; the process runs without the on-disk tier), as ssh refuses a permissive
``~/.ssh``: whoever can write there could plant entries.
"""

from __future__ import annotations

import errno
import os
import stat
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torchneuron.cache import entry as entry_format
from torchneuron.cache import safe_fs
from torchneuron.cache.counters import Counters
from torchneuron.cache.entry import MAX_ENTRY, STORE_VERSION, Entry, EntryError
from torchneuron.cache.safe_fs import UnsafePath

__all__ = ["DiskStore", "UnsafePath"]

_TAG = b"Signature: 8a477f597d28d172789f06886806bc55\n# torchneuron compile cache\n"
_STALE_TMP_S = 3600.0
_MAX_LINK = 1 << 16  # bytes: a link is a header and a key
_SUBDIRS = ("exe", "index", "failed", "stats")
_FOLDERS = {"executable": "exe", "link": "index", "failure": "failed"}  # kind -> folder
# A concurrent `clear` or `rm -rf` can remove an entry's folder between our making it and
# writing into it; a few quick retries ride that out on a loaded machine (two did not).
_WRITE_ATTEMPTS = 5

# Errors after which this process stops writing: retrying would fail the same way.
_LASTING = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT}


def directory_problem(path: Path) -> str | None:
    """Why the folder ``path`` must not be used as (part of) a cache, or None if it may:
    it must be a real directory owned by this user and writable by nobody else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory (a symbolic link or a file)"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return (f"{path} is owned by another user (uid {st.st_uid}, you are {os.getuid()}), "
                "who could plant executables in it")
    if st.st_mode & 0o022:
        return (f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}), "
                "who could plant executables in it; expected mode 0700 (`chmod 700` it)")
    return None


class DiskStore:
    """Entries on disk under ``root``, bounded to ``max_bytes`` by LRU eviction."""

    def __init__(self, root: Path, max_bytes: int, counters: Counters | None = None,
                 *, warn: bool = True) -> None:
        self.root = Path(os.path.realpath(root))
        self.base = self.root / f"v{STORE_VERSION}"
        self.max_bytes = max_bytes
        self.readable = True
        self.writable = True
        self.refused: str | None = None
        self.counters = counters or Counters(None)
        try:
            for attempt in range(_WRITE_ATTEMPTS):
                try:
                    self._make_folders()
                    break
                except FileNotFoundError:
                    # removed while being made (a concurrent `clear` or `rm -rf`): not a
                    # reason to stop caching; each write makes its folder again anyway
                    if attempt == _WRITE_ATTEMPTS - 1:
                        self.counters.add("errors")
        except OSError as e:
            self._give_up_writing(e, warn)
            self.readable = self.base.is_dir()
        if self.refused is not None:
            self.readable = self.writable = False
            if warn:
                warnings.warn(f"torchneuron cache: not using the cache directory: {self.refused}. "
                              "Running without the on-disk cache; fix the folder or set "
                              "TORCHNEURON_CACHE_DIR to a folder only you can write.",
                              stacklevel=4)
        self.counters.folder = self.base / "stats" if self.writable else None

    def _make_folders(self) -> None:
        """The root, the store's folders and the cache tag; ``refused`` set if a folder
        there must not be used."""
        _make_dir(self.root)
        self.refused = self._check_folders()
        if self.refused is None:
            for sub in _SUBDIRS:
                _make_dir(self.base / sub)
            tag = self.root / "CACHEDIR.TAG"
            if not os.path.lexists(tag):
                self._atomic_write(tag, _TAG)

    def _check_folders(self) -> str | None:
        for folder in (self.root, self.base, *(self.base / sub for sub in _SUBDIRS)):
            why = directory_problem(folder)
            if why is not None:
                return why
        return None

    # -- paths ----------------------------------------------------------------------

    def path(self, kind: str, key: str) -> Path:
        return self.base / _FOLDERS[kind] / key[:2] / key

    def exists(self, kind: str, key: str) -> bool:
        return self.readable and os.path.lexists(self.path(kind, key))

    # -- reading -----------------------------------------------------------------------

    def read_bytes(self, path: Path, max_bytes: int = MAX_ENTRY) -> bytes:
        """The bytes of a regular file in the store (``UnsafePath`` for anything else)."""
        return safe_fs.read_file(self.root, path, max_bytes)

    def read(self, kind: str, key: str) -> Entry | None:
        """The verified entry, or None. A bad file is counted, warned about and removed."""
        if not self.readable:
            return None
        p = self.path(kind, key)
        try:
            raw = self.read_bytes(p, MAX_ENTRY if kind == "executable" else _MAX_LINK)
        except FileNotFoundError:
            return None
        except UnsafePath as e:
            return self.discard_bad(p, e.strerror or str(e))
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
            return self.discard_bad(p, str(e))
        return got

    def discard_bad(self, p: Path, why: str) -> None:
        """Count, warn about and remove a bad entry file (a symlink: the link itself)."""
        self.counters.add("corrupt")
        warnings.warn(f"torchneuron cache: removed bad entry {p.name[:12]} ({why}); it "
                      "will be rebuilt", stacklevel=4)
        try:
            self.remove_file(p)
        except OSError:
            pass  # read-only: it stays a counted miss
        return None

    def touch(self, key: str) -> None:
        """Mark an executable used now (LRU order) and count a hit on it."""
        if not self.writable:
            return
        p = self.path("executable", key)
        try:
            safe_fs.touch_file(self.root, p)
            safe_fs.append_file(self.root, Path(f"{p}.hits"), b"+")
        except OSError:
            pass  # evicted meanwhile, read-only or planted: hits are statistics only

    # -- writing -----------------------------------------------------------------------

    def write(self, kind: str, key: str, payload: bytes, meta: dict[str, Any]) -> bool:
        """Atomically write one entry; False (and a warning, once) if the disk refuses."""
        if not self.writable:
            return False
        data = entry_format.encode(kind, key, payload, meta)
        p = self.path(kind, key)
        for attempt in range(_WRITE_ATTEMPTS):
            try:
                _make_dir(p.parent, self.root)
                self._atomic_write(p, data)
                break
            except FileNotFoundError:
                if attempt == _WRITE_ATTEMPTS - 1:  # its folder kept vanishing: skip it only
                    self.counters.add("errors")
                    return False
            except OSError as e:
                if e.errno in _LASTING or isinstance(e, UnsafePath):
                    self._give_up_writing(e)
                else:
                    self.counters.add("errors")
                return False
        self.counters.add("writes")
        if kind == "executable":
            self.evict()
        return True

    def _atomic_write(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(f".tmp-{path.name[:16]}-{uuid.uuid4().hex[:8]}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
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

    def _give_up_writing(self, e: OSError, warn: bool = True) -> None:
        self.counters.add("errors")
        if self.writable and warn:
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

    def _shards(self) -> Iterator[tuple[str, os.DirEntry[str]]]:
        for kind, sub in _FOLDERS.items():
            for shard in safe_fs.scan(self.base / sub):
                yield kind, shard

    def files(self) -> Iterator[tuple[str, Path]]:
        """(kind, path) of every entry file (regular files only: not temporaries, hit
        counters, or anything ``oddities`` lists)."""
        for kind, shard in self._shards():
            if not shard.is_dir(follow_symlinks=False):
                continue
            for e in safe_fs.scan(Path(shard.path)):
                if entry_format.is_key(e.name) and e.is_file(follow_symlinks=False):
                    yield kind, Path(e.path)

    def oddities(self) -> Iterator[tuple[Path, str]]:
        """(path, what it is) of everything in the store that is not a regular file where
        one belongs: symlinks, FIFOs, folders, or an entry folder that is not a directory."""
        for folder in (self.base, *(self.base / sub for sub in _SUBDIRS)):
            if os.path.lexists(folder):
                try:
                    safe_fs.check_dir(folder)
                except UnsafePath as e:
                    yield folder, e.strerror or "not a directory"
        for _, shard in self._shards():
            if not shard.is_dir(follow_symlinks=False):
                yield Path(shard.path), _what(shard) + " where a shard folder belongs"
                continue
            for e in safe_fs.scan(Path(shard.path)):
                if not e.is_file(follow_symlinks=False):
                    yield Path(e.path), _what(e) + " where a file belongs"
        for e in safe_fs.scan(self.base / "stats"):
            if not e.is_file(follow_symlinks=False):
                yield Path(e.path), _what(e) + " where a count file belongs"

    def temporaries(self) -> Iterator[Path]:
        for _, shard in self._shards():
            if shard.is_dir(follow_symlinks=False):
                for e in safe_fs.scan(Path(shard.path)):
                    if e.name.startswith(".tmp-"):
                        yield Path(e.path)

    def remove_file(self, p: Path) -> int:
        """Delete an entry file and its hit counter (never what a symlink points at); the
        bytes freed. An entry file already gone frees 0; any other failure raises."""
        freed = 0
        for i, q in enumerate((p, Path(f"{p}.hits"))):
            try:
                size = os.lstat(q).st_size
                safe_fs.unlink(self.root, q)
                freed += size
            except FileNotFoundError:
                continue
            except OSError:
                if i == 0:
                    raise
        return freed

    def usage(self) -> list[tuple[float, int, Path]]:
        """(last used, bytes, path) of every executable, with its hit counter's bytes."""
        rows = []
        for kind, p in self.files():
            try:
                st = os.lstat(p)
                size = st.st_size
                if kind == "executable":
                    size += hits_size(p)
            except OSError:
                continue
            rows.append((st.st_mtime, size, p))
        return rows

    def evict(self, max_bytes: int | None = None) -> int:
        """Remove least recently used executables, and the links to them, until the store
        fits; the executables removed."""
        bound = self.max_bytes if max_bytes is None else max_bytes
        rows = self.usage()
        total = sum(size for _, size, _ in rows)
        gone: set[str] = set()
        for _, size, p in sorted(r for r in rows if r[2].parent.parent.name == "exe"):
            if total <= bound:
                break
            try:
                self.remove_file(p)
            except OSError:
                continue
            total -= size
            gone.add(p.name)
        if gone:
            self.counters.add("evictions", len(gone))
            self.remove_links_to(gone)
        return len(gone)

    def link_target(self, path: Path) -> str | None:
        """The executable key the link file at ``path`` points to (None if unreadable)."""
        try:
            got = entry_format.decode(self.read_bytes(path, _MAX_LINK), expect_key=path.name)
        except (OSError, EntryError):
            return None
        return got.payload.decode("ascii") if got.kind == "link" else None

    def remove_links_to(self, keys: set[str]) -> int:
        """Delete every link pointing at one of ``keys`` (executables just removed)."""
        n = 0
        for kind, p in list(self.files()):
            if kind == "link" and self.link_target(p) in keys:
                try:
                    self.remove_file(p)
                    n += 1
                except OSError:
                    pass
        return n

    def remove_stale_temporaries(self, older_than_s: float = _STALE_TMP_S) -> int:
        now, n = time.time(), 0
        for p in self.temporaries():
            try:
                if now - os.lstat(p).st_mtime > older_than_s:
                    safe_fs.unlink(self.root, p)
                    n += 1
            except OSError:
                pass
        return n


def hits_size(p: Path) -> int:
    """Hits recorded for the executable at ``p`` (its counter's size; 0 for a symlink)."""
    try:
        st = os.lstat(f"{p}.hits")
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _what(e: os.DirEntry[str]) -> str:
    if e.is_symlink():
        return "a symbolic link"
    if e.is_dir(follow_symlinks=False):
        return "a directory"
    return "a special file"


def _make_dir(path: Path, root: Path | None = None) -> None:
    """Create ``path`` and any missing parents user-only (0700, whatever the umask);
    existing folders are left as they are, but must be real directories (no symlink is
    followed below ``root``)."""
    missing = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for q in reversed(missing):
        try:
            q.mkdir(mode=0o700)
        except FileExistsError:
            pass  # another process made it first
        else:
            os.chmod(q, 0o700)
    if root is not None:
        safe_fs.check_parents(root, path / "x")
    else:
        safe_fs.check_dir(path)
