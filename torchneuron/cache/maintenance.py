"""Destructive and bulk operations behind the CLI: prune, clear, verify, export, import.

Each takes ``dry_run`` where it deletes, and returns what it did (or would do) so the
CLI can print a table or JSON. Export writes a tar archive of entry files; import reads
it member by member, never extracting a path from the archive: each member's bytes are
decoded and verified as an entry, its key is taken from its header, and it is written
through the store's own atomic writer. Anything else in the archive is rejected, and so
is an executable whose content does not match its key (``compiler.executable.
check_entry``, the check a load makes) or a link to an executable neither the archive
nor the cache holds. ``verify`` makes the same checks on every entry, and reports
symlinks and other non-regular files (``--fix`` removes the links themselves).

Removals report what they could not remove (``Failure``): the CLI must not claim a
removal that did not happen.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from torchneuron.cache import counters
from torchneuron.cache import entry as entry_format
from torchneuron.cache.disk import DiskStore
from torchneuron.cache.entry import STORE_VERSION, Entry, EntryError
from torchneuron.cache.inventory import EntryInfo, built_here, current_versions, list_entries

__all__ = ["prune", "clear", "verify", "export", "import_archive", "remove", "Problem",
           "ImportResult", "Failure", "check_executable"]

_MAX_MEMBER = entry_format.MAX_ENTRY
_FRESH_TMP_S = 60.0  # a younger temporary may be a live writer's: clear leaves it


@dataclass
class Failure:
    """A file a removal could not remove, and why."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"cannot remove {self.path}: {self.reason}"


def remove(disk: DiskStore, rows: list[EntryInfo], dry_run: bool = False
           ) -> tuple[int, list[Failure]]:
    """Delete these entries (and their hit counters): (bytes freed, what failed)."""
    freed, failed = 0, []
    for r in rows:
        if dry_run:
            freed += r.size
            continue
        try:
            freed += disk.remove_file(r.path)
        except OSError as e:
            failed.append(Failure(r.path, e.strerror or str(e)))
    return freed, failed


def prune(disk: DiskStore, *, max_size: int | None = None, older_than_s: float | None = None,
          incompatible: bool = False, dry_run: bool = False
          ) -> tuple[list[EntryInfo], list[Failure]]:
    """Remove (or list, with ``dry_run``) entries unused for longer than ``older_than_s``,
    entries this torchneuron cannot use (and other store versions' folders), and then
    least recently used executables until the store fits in ``max_size``; returns
    (removed, failures)."""
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
    planned = sorted(chosen.values(), key=lambda r: r.used)
    if dry_run:
        return planned, []
    _, failed = remove(disk, planned)
    bad = {f.path for f in failed}
    removed = [r for r in planned if r.path not in bad]
    disk.remove_links_to({r.key for r in removed if r.kind == "executable"})
    disk.remove_stale_temporaries()
    if incompatible:
        for other in other_store_versions(disk):
            shutil.rmtree(other, ignore_errors=True)  # (rmtree never follows a symlink)
    if removed:
        disk.counters.add("evictions", sum(r.kind == "executable" for r in removed))
    return removed, failed


def other_store_versions(disk: DiskStore) -> list[Path]:
    """Folders of other store versions (unreachable from this torchneuron)."""
    try:
        names = os.listdir(disk.root)
    except OSError:
        return []
    return sorted(disk.root / n for n in names if n.startswith("v") and n[1:].isdigit()
                  and n != f"v{STORE_VERSION}"
                  and stat.S_ISDIR(os.lstat(disk.root / n).st_mode))


def clear(disk: DiskStore, dry_run: bool = False) -> tuple[list[EntryInfo], list[Failure]]:
    """Remove every entry, temporary file (but a live writer's) and persisted count."""
    rows = list_entries(disk)
    if dry_run:
        return rows, []
    _, failed = remove(disk, rows)
    disk.remove_stale_temporaries(older_than_s=_FRESH_TMP_S)
    failed += [Failure(p, why) for p, why in counters.zero(disk.base / "stats")]
    bad = {f.path for f in failed}
    return [r for r in rows if r.path not in bad], failed


@dataclass
class Problem:
    path: Path
    kind: str
    problem: str
    fixed: bool = False

    def to_json(self) -> dict[str, object]:
        return {"key": self.path.name, "kind": self.kind, "problem": self.problem,
                "fixed": self.fixed, "path": str(self.path)}


def check_executable(got: Entry) -> None:
    """What a load checks (``compiler.executable.check_entry``): the content matches the
    key, the program is what neuronc makes of the StableHLO, every op is known."""
    from torchneuron.compiler.executable import ExecutableFormatError, check_entry

    try:
        check_entry(got.payload, got.key)
    except ExecutableFormatError as e:
        raise EntryError(str(e)) from None


def verify(disk: DiskStore, fix: bool = False, *, content: bool = True) -> list[Problem]:
    """Read every entry in full and check it as a load would (``content``: also as the
    compiler would, ``check_executable``); with ``fix``, delete what is broken: bad files,
    links to absent executables, symlinks and other non-regular files (the link itself,
    never its target), and temporaries left by killed writers."""
    problems: list[Problem] = []
    checked: dict[str, bool] = {}
    files = list(disk.files())
    for kind, path in files:
        if kind != "executable":
            continue
        try:
            got = _decode_file(disk, path, kind)
            entry_format.check_payload(got)
            if content:
                check_executable(got)
            checked[path.name] = True
        except (OSError, EntryError) as e:
            problems.append(Problem(path, kind, str(e)))
    for kind, path in files:
        if kind != "failure":
            continue
        try:
            _decode_file(disk, path, kind)  # (its record is checked by ``decode``)
        except (OSError, EntryError) as e:
            problems.append(Problem(path, kind, str(e)))
    for kind, path in files:
        if kind != "link":
            continue
        try:
            got = _decode_file(disk, path, kind)
            if not checked.get(got.payload.decode("ascii")):
                raise EntryError("links to an executable that is not in the cache (or is "
                                 "broken)")
        except (OSError, EntryError) as e:
            problems.append(Problem(path, kind, str(e)))
    for path, what in disk.oddities():
        problems.append(Problem(path, "unsafe", what))
    for tmp in disk.temporaries():
        problems.append(Problem(tmp, "temporary", "left by an interrupted write"))
    if fix:
        for p in problems:
            try:
                if p.kind == "unsafe" and stat.S_ISDIR(os.lstat(p.path).st_mode):
                    continue  # a real folder where a file belongs: left for a person
                disk.remove_file(p.path)
                p.fixed = not os.path.lexists(p.path)
            except OSError as e:
                p.problem += f"; not removed: {e.strerror or e}"
    return problems


def _decode_file(disk: DiskStore, path: Path, kind: str) -> Entry:
    got = entry_format.decode(disk.read_bytes(path), expect_key=path.name)
    if got.kind != kind:
        raise EntryError(f"a {got.kind} entry in the {kind} folder")
    return got


def export(disk: DiskStore, file: str | Path, rows: list[EntryInfo] | None = None) -> int:
    """Write the (given, or all intact) entries to a tar archive at ``file``; count."""
    rows = [r for r in (list_entries(disk) if rows is None else rows) if r.problem is None]
    n = 0
    with tarfile.open(file, "w:gz") as tar:
        for r in rows:
            try:
                data = disk.read_bytes(r.path)
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
    """Add the entries of an archive made by ``export``, each verified on its own as a load
    would verify it; links only to executables the archive or the cache holds."""
    result = ImportResult()
    links: list[tuple[str, Entry]] = []
    exes: set[str] = set()
    with tarfile.open(file, "r:*") as tar:
        for member in tar:
            if not member.isfile() or member.size > _MAX_MEMBER:
                result.rejected.append((member.name, "not a regular file of sane size"))
                continue
            f = tar.extractfile(member)
            try:
                got = entry_format.decode(f.read() if f else b"")
                entry_format.check_payload(got)
                if got.kind == "executable":
                    check_executable(got)
                if got.kind == "failure":
                    _check_failure_versions(got)
            except EntryError as e:
                result.rejected.append((member.name, str(e)))
                continue
            if got.kind == "link":
                links.append((member.name, got))  # after every executable is known
                continue
            if got.kind == "executable":
                exes.add(got.key)
            _add(disk, member.name, got, result, dry_run)
    for name, got in links:
        target = got.payload.decode("ascii")
        if target not in exes and not disk.exists("executable", target):
            result.rejected.append((name, f"links to executable {target[:12]}, which neither "
                                          "the archive nor the cache holds"))
            continue
        _add(disk, name, got, result, dry_run)
    return result


def _check_failure_versions(got: Entry) -> None:
    """A failed compile recorded by this compiler (another's can never be looked up)."""
    components = got.meta.get("components")
    if not built_here(components):
        recorded = components.get("compiler_version") if isinstance(components, dict) else None
        raise EntryError(f"failure recorded by torchneuron {recorded}, this is "
                         f"{current_versions()['compiler_version']}")


def _add(disk: DiskStore, name: str, got: Entry, result: ImportResult, dry_run: bool) -> None:
    if disk.exists(got.kind, got.key):
        result.skipped.append(got.key)
    elif not dry_run and not disk.write(got.kind, got.key, got.payload, got.meta):
        result.rejected.append((name, "the cache directory is not writable"))
    else:
        result.imported.append(got.key)
