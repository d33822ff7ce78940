"""What is in the cache: one ``EntryInfo`` per entry file, read from headers only.

Used by ``ls``, ``info``, ``prune``, ``verify`` and ``rm``. "Compatible" means this
torchneuron can use the entry: an executable built by the same compiler and executable
format versions (store-version changes live in another folder altogether), a link
whose executable is present and compatible, and a failure recorded by the same versions.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchneuron.cache import entry as entry_format
from torchneuron.cache import safe_fs
from torchneuron.cache.disk import DiskStore, hits_size
from torchneuron.cache.entry import EntryError

__all__ = ["EntryInfo", "list_entries", "find_entries", "current_versions", "built_here",
           "AmbiguousKey"]


class AmbiguousKey(LookupError):
    """A key prefix matched several entries."""


def current_versions() -> dict[str, Any]:
    """The versions an executable must have been built with to be usable here."""
    from torchneuron.compiler import versions

    return {"compiler_version": versions.COMPILER_VERSION,
            "format_version": versions.FORMAT_VERSION}


def built_here(components: Any, versions: dict[str, Any] | None = None) -> bool:
    """Whether an entry's key ``components`` name the compiler and executable-format
    versions of this torchneuron (``current_versions``, or ``versions`` if given)."""
    versions = current_versions() if versions is None else versions
    return isinstance(components, dict) and \
        {k: components.get(k) for k in versions} == versions


@dataclass
class EntryInfo:
    key: str
    kind: str
    path: Path
    size: int
    created: float
    used: float
    hits: int
    meta: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None
    compatible: bool = True
    target: str | None = None  # for links: the executable key

    @property
    def components(self) -> dict[str, Any]:
        got = self.meta.get("components")
        return dict(got) if isinstance(got, dict) else {}  # (a planted header may hold anything)

    def to_json(self) -> dict[str, Any]:
        c = self.components
        return {
            "key": self.key, "kind": self.kind, "size": self.size,
            "created": round(self.created, 3), "used": round(self.used, 3), "hits": self.hits,
            "target": c.get("target"), "name": self.meta.get("name"),
            "source": self.meta.get("source"), "compiler_version": c.get("compiler_version"),
            "format_version": c.get("format_version"), "links_to": self.target,
            "compatible": self.compatible, "problem": self.problem, "path": str(self.path),
        }


def _info(disk: DiskStore, kind: str, path: Path) -> EntryInfo:
    st = os.lstat(path)
    hits = hits_size(path) if kind == "executable" else 0
    size = st.st_size + hits
    try:
        header = entry_format.read_header(
            safe_fs.read_file(disk.root, path, entry_format.HEADER_READ, head=True))
    except (EntryError, OSError) as e:
        return EntryInfo(path.name, kind, path, size, st.st_mtime, st.st_mtime, hits,
                         problem=str(e), compatible=False)
    created = header.get("created")
    info = EntryInfo(path.name, kind, path, size,
                     float(created) if isinstance(created, (int, float)) else st.st_mtime,
                     st.st_mtime, hits, header["meta"])
    if header["key"] != path.name:
        info.problem = "header names another key"
    return info


def list_entries(disk: DiskStore, *, with_links: bool = True) -> list[EntryInfo]:
    """Every entry of the store, executables first; links get their ``target`` read."""
    versions = current_versions()
    rows: list[EntryInfo] = []
    for kind, path in disk.files():
        if kind == "link" and not with_links:
            continue
        try:
            rows.append(_info(disk, kind, path))
        except OSError:
            continue  # removed meanwhile
    exes = {r.key: r for r in rows if r.kind == "executable"}
    for r in rows:
        if r.problem is not None:
            continue
        if r.kind in ("executable", "failure"):
            r.compatible = built_here(r.components, versions)
        else:
            r.target = _link_target(disk, r.key)
            target = exes.get(r.target or "")
            r.compatible = target is not None and target.compatible
    return rows


def _link_target(disk: DiskStore, key: str) -> str | None:
    return disk.link_target(disk.path("link", key))


def find_entries(disk: DiskStore, prefix: str, rows: list[EntryInfo] | None = None) -> list[EntryInfo]:
    """Entries whose key starts with ``prefix`` (raises ``AmbiguousKey`` for several
    entries of one kind only when the prefix is shorter than a full key)."""
    rows = list_entries(disk) if rows is None else rows
    found = [r for r in rows if r.key.startswith(prefix.lower())]
    if len(found) > 1 and len(prefix) < 64:
        raise AmbiguousKey(f"key prefix {prefix!r} matches {len(found)} entries: "
                           + ", ".join(r.key[:16] for r in found[:5]))
    return found


def age_text(t: float, now: float | None = None) -> str:
    """``3m ago`` for people."""
    s = max(0.0, (time.time() if now is None else now) - t)
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n:
            return f"{int(s // n)}{unit} ago"
    return f"{int(s)}s ago"
