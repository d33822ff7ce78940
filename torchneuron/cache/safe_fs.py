"""File access that never leaves the cache directory: no symlink is followed.

Why: the cache directory is shared by every process of the user, and anything in it may
have been planted (a symlink at ``stats/``, at an entry's ``.hits`` counter, at a shard
folder). Following one would let a cache operation read, append to or delete a file
elsewhere. So every path below the (resolved) root is reached through real directories
only (each checked with ``lstat``), files are opened with ``O_NOFOLLOW`` and
``O_NONBLOCK`` (a FIFO must not hang a reader) and must be regular files, and reads are
bounded in size; a file written to (a hit counter) or touched must have no other hard
link. Removing uses ``unlink``, which removes a symlink itself, never its
target. ``UnsafePath`` (an ``OSError``) says which path was refused and why.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

__all__ = ["UnsafePath", "check_dir", "check_parents", "read_file", "append_file",
           "touch_file", "unlink", "scan"]

_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class UnsafePath(OSError):
    """A path in the cache that is a symlink or not the kind of file expected there."""

    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(errno.ELOOP, why, str(path))


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "not a regular file"


def check_dir(path: Path) -> None:
    """Raise ``UnsafePath`` unless ``path`` is a real directory (not a symlink to one)."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(path, f"{_kind(st.st_mode)} where the cache expects a directory")


def check_parents(root: Path, path: Path) -> None:
    """Every folder from ``root`` (exclusive) down to ``path``'s parent is a real directory."""
    parent = path.parent
    rel = parent.relative_to(root)  # ValueError for a path outside root: a caller's bug
    p = root
    for part in rel.parts:
        p = p / part
        check_dir(p)


def _open_regular(path: Path, flags: int, mode: int = 0o600, *, single: bool = False
                  ) -> tuple[int, os.stat_result]:
    try:
        fd = os.open(path, flags | _NOFOLLOW, mode)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EMLINK):
            raise UnsafePath(path, "a symbolic link where the cache expects a file") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePath(path, f"{_kind(st.st_mode)} where the cache expects a file")
    if single and st.st_nlink > 1:  # a hard link: the same file may have a name elsewhere
        os.close(fd)
        raise UnsafePath(path, "a file with several hard links")
    return fd, st


def read_file(root: Path, path: Path, max_bytes: int, *, head: bool = False) -> bytes:
    """The bytes of the regular file ``path`` under ``root``: at most ``max_bytes`` (a
    larger file raises ``EFBIG``, or with ``head`` is cut to its first ``max_bytes``)."""
    check_parents(root, path)
    fd, st = _open_regular(path, os.O_RDONLY)
    try:
        if head:
            return os.read(fd, max_bytes)
        if st.st_size > max_bytes:
            raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
        return data
    finally:
        os.close(fd)


def append_file(root: Path, path: Path, data: bytes) -> None:
    """Append to (or create, 0600) the regular file ``path`` under ``root``."""
    check_parents(root, path)
    fd, _ = _open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, single=True)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def touch_file(root: Path, path: Path) -> None:
    """Set the regular file ``path``'s times to now (through its descriptor)."""
    check_parents(root, path)
    fd, _ = _open_regular(path, os.O_RDONLY, single=True)
    try:
        os.utime(fd)
    finally:
        os.close(fd)


def unlink(root: Path, path: Path) -> None:
    """Remove ``path`` (a symlink is removed itself, never its target)."""
    check_parents(root, path)
    os.unlink(path)


def scan(folder: Path) -> Iterator[os.DirEntry[str]]:
    """The entries of ``folder`` if it is a real directory (nothing otherwise)."""
    try:
        check_dir(folder)
        with os.scandir(folder) as it:
            yield from list(it)
    except OSError:
        return
