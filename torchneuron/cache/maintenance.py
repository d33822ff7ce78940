"""Destructive and bulk operations behind the CLI: prune, clear, verify, export, import.

Each takes ``dry_run`` where it deletes, and returns what it did (or would do) so the
CLI can print a table or JSON. Export writes a tar archive of entry files; import reads
it member by member, never extracting a path from the archive: each member's bytes are
decoded and verified as an entry, its key is taken from its header, and it is written
through the store's own atomic writer. Anything else in the archive is rejected.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from torchneuron.cache import counters
from torchneuron.cache import entry as entry_format
from torchneuron.cache.disk import DiskStore
from torchneuron.cache.entry import STORE_VERSION, EntryError
from torchneuron.cache.inventory import EntryInfo, list_entries

__all__ = ["prune", "clear", "verify", "export", "import_archive", "remove", "Problem",
           "ImportResult"]

_MAX_MEMBER = 1 << 31


def remove(disk: DiskStore, rows: list[EntryInfo], dry_run: bool = False) -> int:
    """Delete these entries (and their hit counters); the bytes freed."""
    return sum(r.size if dry_run else disk.remove_file(r.path) for r in rows)


def prune(disk: DiskStore, *, max_size: int | None = None, older_than_s: float | None = None,
          incompatible: bool = False, dry_run: bool = False) -> list[EntryInfo]:
    """Remove (or list, with ``dry_run``) entries unused for longer than ``older_than_s``,
    entries this torchneuron cannot use (and other store versions' folders), and then
    least recently used executables until the store fits in ``max_size``."""
    rows = list_entries(disk)
    now = time.time()
    chosen: dict[Path, EntryInfo] = {}
    for r in rows:
        if incompatible and (not r.compatible or r.problem):
            chosen[r.path] = r
        if older_than_s is not None and now - r.used > older_than_s:
            chosen[r.path] = r
    if max_size is not None:
        total = sum(r.size for r in rows if r.path not in chosen)
        for r in sorted((r for r in rows if r.kind == "executable"), key=lambda r: r.used):
            if total <= max_size:
                break
            if r.path not in chosen:
                chosen[r.path] = r
                total -= r.size
    removed = sorted(chosen.values(), key=lambda r: r.used)
    if not dry_run:
        remove(disk, removed)
        disk.remove_stale_temporaries()
        if incompatible:
            for other in other_store_versions(disk):
                shutil.rmtree(other, ignore_errors=True)
        if removed:
            disk.counters.add("evictions", sum(r.kind == "executable" for r in removed))
    return removed


def other_store_versions(disk: DiskStore) -> list[Path]:
    """Folders of other store versions (unreachable from this torchneuron)."""
    if not disk.root.is_dir():
        return []
    return sorted(p for p in disk.root.glob("v*") if p.is_dir() and p.name[1:].isdigit()
                  and p.name != f"v{STORE_VERSION}")


def clear(disk: DiskStore, dry_run: bool = False) -> list[EntryInfo]:
    """Remove every entry, temporary file and persisted count."""
    rows = list_entries(disk)
    if not dry_run:
        remove(disk, rows)
        disk.remove_stale_temporaries(older_than_s=0)
        counters.zero(disk.base / "stats")
    return rows


@dataclass
class Problem:
    path: Path
    kind: str
    problem: str
    fixed: bool = False

    def to_json(self) -> dict[str, object]:
        return {"key": self.path.name, "kind": self.kind, "problem": self.problem,
                "fixed": self.fixed, "path": str(self.path)}


def verify(disk: DiskStore, fix: bool = False) -> list[Problem]:
    """Read every entry in full and check it; with ``fix``, delete what is broken: bad
    files, links to absent executables, and temporaries left by killed writers."""
    problems: list[Problem] = []
    present = {p.name for kind, p in disk.files() if kind == "executable"}
    for kind, path in list(disk.files()):
        try:
            got = entry_format.decode(path.read_bytes(), expect_key=path.name)
            if got.kind != kind:
                raise EntryError(f"a {got.kind} entry in the {kind} folder")
            entry_format.check_payload(got)
            if kind == "link" and got.payload.decode("ascii") not in present:
                raise EntryError("links to an executable that is not in the cache")
        except (OSError, EntryError) as e:
            problems.append(Problem(path, kind, str(e)))
    for tmp in disk.temporaries():
        problems.append(Problem(tmp, "temporary", "left by an interrupted write"))
    if fix:
        for p in problems:
            disk.remove_file(p.path)
            p.fixed = not p.path.exists()
    return problems


def export(disk: DiskStore, file: str | Path, rows: list[EntryInfo] | None = None) -> int:
    """Write the (given, or all intact) entries to a tar archive at ``file``; count."""
    rows = [r for r in (list_entries(disk) if rows is None else rows) if r.problem is None]
    n = 0
    with tarfile.open(file, "w:gz") as tar:
        for r in rows:
            try:
                data = r.path.read_bytes()
                entry_format.decode(data, expect_key=r.key)
            except (OSError, EntryError):
                continue
            info = tarfile.TarInfo(f"{r.kind}/{r.key}")
            info.size, info.mtime, info.mode = len(data), int(r.created), 0o600
            tar.addfile(info, io.BytesIO(data))
            n += 1
    return n


@dataclass
class ImportResult:
    imported: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already present
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (member, why)


def import_archive(disk: DiskStore, file: str | Path, dry_run: bool = False) -> ImportResult:
    """Add the entries of an archive made by ``export``, each verified on its own."""
    result = ImportResult()
    with tarfile.open(file, "r:*") as tar:
        for member in tar:
            if not member.isfile() or member.size > _MAX_MEMBER:
                result.rejected.append((member.name, "not a regular file of sane size"))
                continue
            f = tar.extractfile(member)
            try:
                got = entry_format.decode(f.read() if f else b"")
                entry_format.check_payload(got)
            except EntryError as e:
                result.rejected.append((member.name, str(e)))
                continue
            if disk.path(got.kind, got.key).exists():
                result.skipped.append(got.key)
                continue
            if not dry_run and not disk.write(got.kind, got.key, got.payload, got.meta):
                result.rejected.append((member.name, "the cache directory is not writable"))
                continue
            result.imported.append(got.key)
    return result
