"""``torchneuron-cache`` (also ``python -m torchneuron.cache``): inspect and maintain the cache.

In the manner of ccache and ``hf cache``: tables for people, ``--json`` for scripts
(a list of objects, each with ``key``). Keys may be given by a unique prefix.

Exit codes: 0 success; 1 something was not found, is broken (``verify``), was
rejected (``import``) or could not be removed (each such path is named with the
reason), or the directory is refused (others can write it: see ``disk.py``); 2 bad
usage (also out-of-range numbers); 3 a destructive command needs ``--yes`` (stdin is
not a terminal) or the confirmation was declined.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
from collections.abc import Sequence
from typing import Any

from torchneuron.cache import config, counters, maintenance
from torchneuron.cache._table import parse_age, parse_filter, table
from torchneuron.cache.disk import DiskStore
from torchneuron.cache.inventory import (
    AmbiguousKey,
    EntryInfo,
    age_text,
    find_entries,
    list_entries,
)

__all__ = ["main", "build_parser"]

OK, FAILED, USAGE, NEEDS_YES = 0, 1, 2, 3
_SORT_DESC = {"size": True, "created": True, "used": True, "hits": True, "key": False}
_EXAMPLES = {
    "dir": "torchneuron-cache dir",
    "stats": "torchneuron-cache stats          # counts over every process\n"
             "  torchneuron-cache stats --zero   # start counting afresh",
    "ls": "torchneuron-cache ls --sort size --limit 10\n"
          "  torchneuron-cache ls --filter 'size>1MB' --filter name~backward --json",
    "info": "torchneuron-cache info 3fa9c1",
    "rm": "torchneuron-cache rm 3fa9c1 77b0e2",
    "prune": "torchneuron-cache prune --max-size 2GB --dry-run\n"
             "  torchneuron-cache prune --older-than 30d --incompatible --yes",
    "clear": "torchneuron-cache clear --dry-run\n  torchneuron-cache clear --yes",
    "verify": "torchneuron-cache verify --fix",
    "export": "torchneuron-cache export warm-cache.tar.gz",
    "import": "torchneuron-cache import warm-cache.tar.gz",
}


def _out(args: argparse.Namespace, human: str, data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else human)


def _rows_table(rows: list[EntryInfo]) -> str:
    body = [[r.key[:16], r.kind, config.format_size(r.size), age_text(r.created),
             age_text(r.used), r.hits, r.components.get("target") or "-",
             _name(r), "" if r.compatible else "incompatible"]
            for r in rows]
    return table(["KEY", "KIND", "SIZE", "CREATED", "USED", "HITS", "TARGET", "NAME/LINK", ""],
                 body) if rows else "(no entries)"


def _name(r: EntryInfo) -> str:
    """An executable's name, a link's executable, a failed compile's stage and reason."""
    if r.kind == "failure":
        return f"failed: {r.meta.get('stage')}, {r.meta.get('reason')}"
    return str(r.meta.get("name") or (r.target or "-")[:16])


def _confirm(args: argparse.Namespace, what: str) -> bool:
    if args.yes or args.dry_run:
        return True
    if not sys.stdin.isatty():
        print(f"{what}: pass --yes to confirm (or --dry-run to only list).", file=sys.stderr)
        return False
    return input(f"{what}? [y/N] ").strip().lower() in ("y", "yes")


def cmd_dir(args: argparse.Namespace, disk: DiskStore) -> int:
    _out(args, str(disk.root), [{"key": "dir", "path": str(disk.root)}])
    return OK


def _failed(args: argparse.Namespace, failures: list[maintenance.Failure]) -> int:
    """Report removals that did not happen (one line each, on stderr): exit 1, or OK."""
    for f in failures:
        print(f"torchneuron-cache {args.command}: {f}", file=sys.stderr)
    return FAILED if failures else OK


def cmd_stats(args: argparse.Namespace, disk: DiskStore) -> int:
    folder = disk.base / "stats"
    failures = [maintenance.Failure(p, why) for p, why in counters.zero(folder)] \
        if args.zero else []
    totals = counters.read_totals(folder)
    rows = list_entries(disk)
    kinds = {k: sum(r.kind == k for r in rows) for k in ("executable", "link", "failure")}
    size = sum(r.size for r in rows)
    lookups = totals["hits"] + totals["misses"]
    rate = f"{100 * totals['hits'] / lookups:.1f} %" if lookups else "-"
    facts = [("cache directory", str(disk.root)), ("executables", kinds["executable"]),
             ("links", kinds["link"]), ("failed compiles", kinds["failure"]),
             ("size", f"{config.format_size(size)} of {config.format_size(disk.max_bytes)}"),
             ("hit rate", rate)] + [(k.replace("_", " "), v) for k, v in totals.items()]
    data = [{"key": k, "value": v} for k, v in
            [("dir", str(disk.root)), ("executables", kinds["executable"]),
             ("links", kinds["link"]), ("failures", kinds["failure"]),
             ("size", size), ("max_size", disk.max_bytes)] + list(totals.items())]
    _out(args, "\n".join(f"{k:<16} {v}" for k, v in facts), data)
    return _failed(args, failures)


def _select(args: argparse.Namespace, disk: DiskStore) -> list[EntryInfo]:
    rows = list_entries(disk)
    keep = [parse_filter(f) for f in args.filter or []]
    rows = [r for r in rows if all(k(r.to_json()) for k in keep)]
    desc = _SORT_DESC[args.sort]
    rows.sort(key=lambda r: getattr(r, args.sort), reverse=desc)
    return rows[: args.limit] if args.limit is not None else rows


def cmd_ls(args: argparse.Namespace, disk: DiskStore) -> int:
    rows = _select(args, disk)
    _out(args, _rows_table(rows), [r.to_json() for r in rows])
    return OK


def _one(disk: DiskStore, prefix: str) -> EntryInfo | None:
    try:
        found = find_entries(disk, prefix)
    except AmbiguousKey as e:
        print(f"torchneuron-cache: {e}; give more characters.", file=sys.stderr)
        return None
    if not found:
        print(f"torchneuron-cache: no entry with key {prefix!r} in {disk.root}; "
              "`torchneuron-cache ls` lists them.", file=sys.stderr)
        return None
    return found[0]


def cmd_info(args: argparse.Namespace, disk: DiskStore) -> int:
    from torchneuron.cache.describe import describe

    r = _one(disk, args.key)
    if r is None:
        return FAILED
    try:
        data, text = describe(disk, r)
    except (AttributeError, KeyError, TypeError, IndexError) as e:  # a malformed payload
        print(f"torchneuron-cache info: entry {r.key[:16]} is malformed ({type(e).__name__}: "
              f"{e}); `torchneuron-cache verify --fix` removes it.", file=sys.stderr)
        return FAILED
    _out(args, text, [data])
    return OK


def cmd_rm(args: argparse.Namespace, disk: DiskStore) -> int:
    rows = [r for r in (_one(disk, k) for k in args.keys) if r is not None]
    freed, failures = maintenance.remove(disk, rows)
    bad = {f.path for f in failures}
    done = [r for r in rows if r.path not in bad]
    _out(args, f"removed {len(done)} entries, {config.format_size(freed)}",
         [{"key": r.key, "kind": r.kind, "size": r.size, "removed": r.path not in bad}
          for r in rows])
    disk.remove_links_to({r.key for r in done if r.kind == "executable"})
    return FAILED if _failed(args, failures) or len(rows) != len(args.keys) else OK


def _removal_report(args: argparse.Namespace, rows: list[EntryInfo], verb: str) -> None:
    size = config.format_size(sum(r.size for r in rows))
    head = (f"would remove {len(rows)} entries, {size}" if args.dry_run
            else f"{verb} {len(rows)} entries, {size}")
    human = head + ("\n" + _rows_table(rows) if rows else "")
    _out(args, human, [{**r.to_json(), "removed": not args.dry_run} for r in rows])


def cmd_prune(args: argparse.Namespace, disk: DiskStore) -> int:
    if args.max_size is None and args.older_than is None and not args.incompatible:
        args.max_size = disk.max_bytes  # default: enforce the configured bound
    kwargs = dict(max_size=args.max_size, older_than_s=args.older_than,
                  incompatible=args.incompatible)
    planned, _ = maintenance.prune(disk, dry_run=True, **kwargs)  # type: ignore[arg-type]
    if not args.dry_run and planned and not _confirm(args, f"remove {len(planned)} entries"):
        return NEEDS_YES
    rows, failures = (planned, []) if args.dry_run else \
        maintenance.prune(disk, **kwargs)  # type: ignore[arg-type]
    _removal_report(args, rows, "pruned")
    return _failed(args, failures)


def cmd_clear(args: argparse.Namespace, disk: DiskStore) -> int:
    planned = list_entries(disk)
    if not args.dry_run and not _confirm(args, f"remove all {len(planned)} entries in {disk.root}"):
        return NEEDS_YES
    rows, failures = maintenance.clear(disk, dry_run=args.dry_run)
    _removal_report(args, rows, "cleared")
    return _failed(args, failures)


def cmd_verify(args: argparse.Namespace, disk: DiskStore) -> int:
    problems = maintenance.verify(disk, fix=args.fix)
    n = len(list(disk.files()))
    human = (f"{n} entries checked, {len(problems)} problems"
             + ("" if not problems else "\n" + table(
                 ["KEY", "KIND", "PROBLEM", "FIXED"],
                 [[p.path.name[:16], p.kind, p.problem, p.fixed] for p in problems])))
    _out(args, human, [p.to_json() for p in problems])
    return OK if all(p.fixed for p in problems) else FAILED


def cmd_export(args: argparse.Namespace, disk: DiskStore) -> int:
    n = maintenance.export(disk, args.file)
    _out(args, f"exported {n} entries to {args.file}", [{"key": "export", "entries": n,
                                                          "file": args.file}])
    return OK


def cmd_import(args: argparse.Namespace, disk: DiskStore) -> int:
    res = maintenance.import_archive(disk, args.file)
    human = (f"imported {len(res.imported)}, already present {len(res.skipped)}, "
             f"rejected {len(res.rejected)}"
             + "".join(f"\n  rejected {m}: {why}" for m, why in res.rejected))
    data = ([{"key": k, "status": "imported"} for k in res.imported]
            + [{"key": k, "status": "present"} for k in res.skipped]
            + [{"key": m, "status": "rejected", "reason": why} for m, why in res.rejected])
    _out(args, human, data)
    return FAILED if res.rejected else OK


def _count(text: str) -> int:
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is negative; give a count >= 0")
    return n


def _size(text: str) -> int:
    try:
        n = config.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative; give a size >= 0 (e.g. 2GB)")
    return n


def _age(text: str) -> float:
    try:
        return parse_age(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchneuron-cache", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Inspect and maintain torchneuron's compile cache.",
        epilog="exit codes: 0 ok, 1 not found / broken / rejected, 2 usage, "
               "3 needs --yes\nexample:\n  " + _EXAMPLES["stats"])
    p.add_argument("--dir", help="cache directory (default: TORCHNEURON_CACHE_DIR or "
                   "the user cache directory)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(name: str, help_text: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_text, description=help_text,
                            epilog="example:\n  " + _EXAMPLES[name],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.add_argument("--json", action="store_true", help="print JSON (a list of objects)")
        return sp

    cmd("dir", "print the cache directory")
    cmd("stats", "hit/miss/write/eviction/error counts over all processes, and the size"
        ).add_argument("--zero", action="store_true", help="reset the persisted counts first")
    ls = cmd("ls", "list entries")
    ls.add_argument("--sort", choices=list(_SORT_DESC), default="used",
                    help="order (key ascending, others largest/newest first; default used)")
    ls.add_argument("--filter", action="append", metavar="EXPR",
                    help="FIELD OP VALUE, OP in = != < > <= >= ~ (contains); fields: key, "
                         "kind, size, hits, target, name, source, compatible, age, idle; "
                         "repeat to AND")
    ls.add_argument("--limit", type=_count, metavar="N", help="show at most N entries")
    cmd("info", "everything about one entry: key components, sizes, StableHLO, kernels, "
        "schedule, cost").add_argument("key", help="a key or unique key prefix")
    cmd("rm", "remove entries").add_argument("keys", nargs="+", metavar="KEY")
    pr = cmd("prune", "remove old, incompatible or least recently used entries (with no "
             "option: evict down to TORCHNEURON_CACHE_MAX_SIZE)")
    pr.add_argument("--max-size", type=_size, metavar="SIZE",
                    help="evict least recently used executables down to SIZE (e.g. 2GB)")
    pr.add_argument("--older-than", type=_age, metavar="AGE",
                    help="remove entries unused for longer than AGE (e.g. 30d, 12h)")
    pr.add_argument("--incompatible", action="store_true",
                    help="remove entries this torchneuron cannot use (other versions)")
    cl = cmd("clear", "remove every entry")
    for sp in (pr, cl):
        sp.add_argument("--dry-run", action="store_true", help="only list what would go")
        sp.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    cmd("verify", "read every entry in full and check it").add_argument(
        "--fix", action="store_true", help="delete broken entries and leftover temporaries")
    cmd("export", "write all entries to a tar.gz archive").add_argument("file")
    cmd("import", "add the entries of an exported archive, each verified").add_argument("file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or bad usage (2): a code, also when called in-process
        return int(e.code or 0)
    root = config.cache_dir() if args.dir is None else args.dir
    disk = DiskStore(root, config.max_size(), warn=False)
    if disk.refused is not None and args.command != "dir":
        print(f"torchneuron-cache {args.command}: refusing to use {disk.root}: "
              f"{disk.refused}.", file=sys.stderr)
        return FAILED
    handler = globals()[f"cmd_{args.command}"]
    try:
        return int(handler(args, disk))
    except ValueError as e:  # a bad --filter, size or age
        print(f"torchneuron-cache {args.command}: {e}", file=sys.stderr)
        return USAGE
    except BrokenPipeError:  # `torchneuron-cache ls | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    except (OSError, tarfile.TarError) as e:  # export/import: a missing or unreadable file
        where = getattr(args, "file", None) or getattr(e, "filename", None) or root
        why = ("not a tar archive (write one with `torchneuron-cache export`)"
               if isinstance(e, tarfile.TarError) else e.strerror or e)
        print(f"torchneuron-cache {args.command}: cannot use {where}: {why}", file=sys.stderr)
        return FAILED
    finally:
        disk.counters.flush()


if __name__ == "__main__":
    sys.exit(main())
