"""A hostile cache directory: symlinks planted in it, folders others can write, deep JSON,
bad settings, links left by eviction, a ``clear`` racing a writer.

Nothing outside the directory is read, written or deleted, whatever runs; a planted or
unreadable file is a counted miss (or ignored, for counts), never an exception.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import stat
import traceback
from pathlib import Path
from typing import Any

import pytest

from tests.cache.helpers import fake_exe, fake_key
from torchneuron.cache import CacheStore, cli, config
from torchneuron.cache import entry as entry_format
from torchneuron.cache.maintenance import verify

_ctx = mp.get_context("fork")
_PRECIOUS = '{"hits": 7777777}'


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the cache that nothing may change."""
    outside = tmp_path / "outside"
    outside.mkdir()
    v = outside / "victim.json"
    v.write_text(_PRECIOUS)
    os.utime(v, (1000, 1000))
    return v


def _untouched(v: Path) -> bool:
    return v.exists() and v.read_text() == _PRECIOUS and v.stat().st_mtime == 1000


def _saved(root: Path, i: int = 1) -> tuple[CacheStore, Path]:
    s = CacheStore(root)
    s.save(fake_key(i), fake_exe(i), {})
    s.link(fake_key(("g", i)), fake_key(i))
    s.flush()
    return s, s.disk.path("executable", fake_key(i))


def test_stats_zero_deletes_nothing_through_a_symlinked_stats_folder(cache_root: Path,
                                                                     victim: Path) -> None:
    _saved(cache_root)
    stats_dir = cache_root / "v1" / "stats"
    shutil.rmtree(stats_dir)
    stats_dir.symlink_to(victim.parent)
    assert cli.main(["--dir", str(cache_root), "stats", "--zero"]) == 1  # refused, says why
    assert _untouched(victim)


def test_a_symlinked_count_file_is_neither_read_nor_followed(cache_root: Path, victim: Path,
                                                             capsys: Any) -> None:
    _saved(cache_root)
    (cache_root / "v1" / "stats" / "planted.json").symlink_to(victim)
    assert cli.main(["--dir", str(cache_root), "stats", "--json"]) == 0
    assert "7777777" not in capsys.readouterr().out  # the victim's count is not read
    assert cli.main(["--dir", str(cache_root), "stats", "--zero"]) == 0
    assert _untouched(victim)


def test_a_hit_appends_nothing_through_a_symlinked_hits_file(cache_root: Path,
                                                             victim: Path) -> None:
    _, exe = _saved(cache_root)
    Path(f"{exe}.hits").symlink_to(victim)
    fresh = CacheStore(cache_root)
    assert fresh.load(fake_key(1)) == fake_exe(1)  # a hit, counted in memory only
    assert _untouched(victim)


def test_a_hit_touches_nothing_through_hard_links(cache_root: Path, victim: Path) -> None:
    _, exe = _saved(cache_root)
    os.link(victim, f"{exe}.hits")
    fresh = CacheStore(cache_root)
    assert fresh.load(fake_key(1)) == fake_exe(1)
    assert _untouched(victim)


def test_a_symlinked_entry_is_a_counted_miss(cache_root: Path, victim: Path) -> None:
    _, exe = _saved(cache_root)
    shutil.copy(exe, victim)  # a valid entry, outside
    os.utime(victim, (1000, 1000))
    victim_bytes = victim.read_bytes()
    exe.unlink()
    exe.symlink_to(victim)
    fresh = CacheStore(cache_root)
    with pytest.warns(UserWarning, match="symbolic link"):
        assert fresh.load(fake_key(1)) is None
    assert fresh.counters.counts["corrupt"] == 1 and not os.path.lexists(exe)
    assert victim.read_bytes() == victim_bytes and victim.stat().st_mtime == 1000


@pytest.mark.parametrize("command", [["clear", "--yes"], ["prune", "--max-size", "0", "--yes"],
                                     ["verify", "--fix"], ["rm", "ffff"]])
def test_a_symlinked_shard_folder_is_never_entered(cache_root: Path, victim: Path,
                                                   command: list[str]) -> None:
    s, exe = _saved(cache_root)
    key = fake_key(1)
    outside_entry = victim.parent / key  # named like an entry, outside the cache
    shutil.copy(exe, outside_entry)
    shard = exe.parent
    shutil.rmtree(shard)
    shard.symlink_to(victim.parent)
    cli.main(["--dir", str(cache_root), *command])
    s.save(fake_key(2), fake_exe(2), {})  # a write (and eviction) in a live store too
    CacheStore(cache_root, max_bytes=0).save(fake_key(3), fake_exe(3), {})
    assert _untouched(victim) and outside_entry.exists()
    problems = verify(CacheStore(cache_root).disk, content=False)
    if command[0] == "verify":  # --fix removed the symlink itself
        assert not shard.is_symlink()
    else:
        assert any("symbolic link" in p.problem for p in problems)


def test_a_folder_others_can_write_is_refused(cache_root: Path) -> None:
    _saved(cache_root)
    cache_root.chmod(0o777)
    with pytest.warns(UserWarning, match="writable by other users"):
        s = CacheStore(cache_root)
    assert s.load(fake_key(1)) is None  # planted entries are not read
    s.save(fake_key(5), fake_exe(5), {})
    assert not s.disk.path("executable", fake_key(5)).exists()
    assert s.load(fake_key(5)) == fake_exe(5)  # the in-process tier still serves
    assert stat.S_IMODE(cache_root.stat().st_mode) == 0o777  # left for its owner to fix
    assert cli.main(["--dir", str(cache_root), "ls"]) == 1


@pytest.mark.skipif(os.getuid() != 0, reason="changing a folder's owner needs root")
def test_a_folder_owned_by_another_user_is_refused(cache_root: Path) -> None:
    _saved(cache_root)
    os.chown(cache_root, 65534, 65534)
    with pytest.warns(UserWarning, match="owned by another user"):
        s = CacheStore(cache_root)
    assert s.load(fake_key(1)) is None and not s.disk.writable


def test_deeply_nested_json_is_refused_not_a_crash(cache_root: Path) -> None:
    s, exe = _saved(cache_root)
    (cache_root / "v1" / "stats" / "deep.json").write_bytes(b"[" * 100_000)
    k = fake_key(7)
    deep = s.disk.path("executable", k)
    deep.parent.mkdir(exist_ok=True)
    deep.write_bytes(b'{"magic": "torchneuron-cache", "meta": ' + b"[" * 100_000 + b"\n{}")
    assert cli.main(["--dir", str(cache_root), "stats"]) == 0
    assert cli.main(["--dir", str(cache_root), "ls"]) == 0
    assert cli.main(["--dir", str(cache_root), "verify"]) == 1  # reported as a problem
    with pytest.warns(UserWarning, match="nested deeper"):
        assert CacheStore(cache_root).load(k) is None


def test_bad_size_settings_warn_and_use_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchneuron.hardware import settings

    monkeypatch.setenv("TORCHNEURON_CACHE_MAX_SIZE", "garbage")
    monkeypatch.setenv("TORCHNEURON_CACHE_MEMORY_SIZE", "-5MB")
    settings.reset()
    try:
        with pytest.warns(UserWarning, match="TORCHNEURON_CACHE_MAX_SIZE=.garbage.*10GB"):
            assert config.max_size() == 10 * 10**9
        with pytest.warns(UserWarning, match="TORCHNEURON_CACHE_MEMORY_SIZE"):
            assert config.memory_size() == 256 * 10**6
    finally:
        settings.reset()


def test_eviction_leaves_no_link_to_what_it_evicted(cache_root: Path) -> None:
    one = len(entry_format.encode("executable", fake_key(0), fake_exe(0, 5000), {}))
    s = CacheStore(cache_root, max_bytes=int(2.5 * one), memory_bytes=0)
    for i in range(6):
        s.save(fake_key(i), fake_exe(i, 5000), {})
        s.link(fake_key(("g", i)), fake_key(i))
    assert s.counters.counts["evictions"] >= 3
    assert verify(s.disk, content=False) == []
    fresh = CacheStore(cache_root)
    assert fresh.resolve(fake_key(("g", 0))) is None  # a clean miss


def test_a_dangling_link_resolves_to_a_clean_miss_and_is_removed(cache_root: Path) -> None:
    s = CacheStore(cache_root)
    s.disk.write("link", fake_key("g"), fake_key("absent").encode(), {"kind": "link"})
    assert CacheStore(cache_root).resolve(fake_key("g")) is None
    assert not s.disk.path("link", fake_key("g")).exists() and verify(s.disk, content=False) == []


def test_a_store_opened_while_its_folder_is_removed_still_caches(
        cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process's `clear` or `rm -rf` removing the store's folder while this one
    makes it (the folder gone between its `mkdir` and the next) is not a reason to stop
    caching for the life of the process; a full disk or a read-only one is."""
    from torchneuron.cache import disk

    CacheStore(cache_root)
    make_dir, raced = disk._make_dir, []

    def removed_meanwhile(path: Path, root: Path | None = None) -> None:
        if path.name == "index" and not raced:
            raced.append(path)
            shutil.rmtree(path.parent)  # what the other process did
            raise FileNotFoundError(2, "No such file or directory", str(path))
        make_dir(path, root)

    monkeypatch.setattr(disk, "_make_dir", removed_meanwhile)
    s = CacheStore(cache_root, memory_bytes=0)
    assert raced and s.disk.writable and s.disk.readable
    s.save(fake_key("after"), fake_exe("after"), {})
    assert CacheStore(cache_root, memory_bytes=0).load(fake_key("after")) == fake_exe("after")


def _write_through_clears(root: str, n: int, done: Any, stopped: Any, report: Any) -> None:
    """Save ``n`` entries while the parent clears the store; then, once the clears have
    stopped, one more. Sends what went wrong (or "ok") to the parent, which asserts it:
    a forked child's traceback would otherwise be lost with its stderr."""
    try:
        s = CacheStore(root, memory_bytes=0)
        for i in range(n):
            s.save(fake_key(("w", i)), fake_exe(i, 20_000), {})
        done.set()
        counts = dict(s.counters.counts)
        assert s.disk.writable, f"a concurrent clear stopped this process from caching: {counts}"
        assert counts.get("writes", 0) >= n - 3, f"more than 3 writes lost: {counts}"
        assert stopped.wait(60), "the parent never stopped clearing"
        s.save(fake_key("last"), fake_exe("last"), {})
        assert s.load(fake_key("last")) == fake_exe("last"), "the last save was not loaded"
    except BaseException:  # noqa: BLE001 - reported to the parent, whatever it was
        report.send(traceback.format_exc())
        raise
    report.send("ok")


def test_a_concurrent_clear_never_stops_another_process_caching(cache_root: Path) -> None:
    CacheStore(cache_root)
    done, stopped = _ctx.Event(), _ctx.Event()
    got, report = _ctx.Pipe(duplex=False)
    p = _ctx.Process(target=_write_through_clears,
                     args=(str(cache_root), 300, done, stopped, report))
    p.start()
    rounds = 0
    while not done.is_set() and p.is_alive():
        assert cli.main(["--dir", str(cache_root), "clear", "--yes"]) == 0
        if rounds % 3 == 2:
            shutil.rmtree(cache_root / "v1", ignore_errors=True)  # `rm -rf` as well
        rounds += 1
    stopped.set()
    p.join(120)
    told = got.recv() if got.poll(5) else f"nothing (exit code {p.exitcode})"
    assert told == "ok", f"the writing process failed:\n{told}"
    assert p.exitcode == 0 and rounds > 2


def _share_small_cache(root: str, w: int, go: Any) -> None:
    go.wait(30)
    s = CacheStore(root, max_bytes=60_000, memory_bytes=0)
    for i in range(20):
        s.save(fake_key((w, i)), fake_exe((w, i), 6_000), {})
        s.link(fake_key(("g", w, i)), fake_key((w, i)))
        s.resolve(fake_key(("g", (w + 1) % 5, i)))


def test_five_processes_sharing_a_small_cache_leave_no_broken_link(cache_root: Path) -> None:
    CacheStore(cache_root)
    go = _ctx.Event()
    procs = [_ctx.Process(target=_share_small_cache, args=(str(cache_root), w, go))
             for w in range(5)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert verify(CacheStore(cache_root).disk, content=False) == []
