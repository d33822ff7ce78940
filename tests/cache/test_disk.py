"""The two tiers in one process: round trips, bad files, degraded disks, eviction.

Every bad file is a counted miss that is removed; a disk that refuses writes is one
warning and no caching, never an exception.
"""

from __future__ import annotations

import errno
import os
import stat
import warnings
from pathlib import Path

import pytest

from tests.cache.helpers import fake_exe, fake_key
from torchneuron.cache import CacheStore, disk
from torchneuron.cache import entry as entry_format
from torchneuron.cache.counters import read_totals
from torchneuron.compiler.store import ExecutableStore


def test_round_trip_through_both_tiers(store: CacheStore, cache_root: Path) -> None:
    assert isinstance(store, ExecutableStore)
    k, g = fake_key(1), fake_key("graph")
    assert store.load(k) is None and store.resolve(g) is None
    store.save(k, fake_exe(1), {"kind": "executable"})
    store.link(g, k)
    assert store.load(k) == fake_exe(1) and store.resolve(g) == k
    assert store.counters.counts["memory_hits"] == 1
    other = CacheStore(cache_root)  # another process, in effect: only the disk is shared
    assert other.resolve(g) == k and other.load(k) == fake_exe(1)
    assert other.counters.counts["disk_hits"] == 1 and other.load(k) == fake_exe(1)
    assert other.counters.counts["memory_hits"] == 1
    assert Path(f"{other.disk.path('executable', k)}.hits").stat().st_size == 1


def test_counts_persist_across_stores(store: CacheStore, cache_root: Path) -> None:
    k = fake_key(2)
    store.save(k, fake_exe(2), {})
    store.load(fake_key(3))
    store.flush()
    other = CacheStore(cache_root)
    other.load(k)
    other.flush()
    totals = read_totals(other.disk.base / "stats")
    assert totals["writes"] == 1 and totals["misses"] == 1 and totals["hits"] == 1


def _corrupt(path: Path, how: str) -> None:
    raw = path.read_bytes()
    if how == "flip":
        i = len(raw) - 10
        path.write_bytes(raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1:])
    elif how == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "header-only":
        path.write_bytes(raw.split(b"\n")[0])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(os.urandom(200))
    elif how == "other-key":
        path.write_bytes(entry_format.encode("executable", fake_key("x"), b"{}", {}))


@pytest.mark.parametrize("how", ["flip", "truncate", "header-only", "empty", "garbage",
                                 "other-key"])
def test_bad_file_is_a_counted_miss_and_removed(cache_root: Path, how: str) -> None:
    k = fake_key(4)
    CacheStore(cache_root).save(k, fake_exe(4), {})
    fresh = CacheStore(cache_root)
    path = fresh.disk.path("executable", k)
    _corrupt(path, how)
    with pytest.warns(UserWarning, match="removed bad entry"):
        assert fresh.load(k) is None
    assert not path.exists()
    assert fresh.counters.counts["corrupt"] == 1 and fresh.counters.counts["misses"] == 1
    fresh.save(k, fake_exe(4), {})  # rebuilt
    assert CacheStore(cache_root).load(k) == fake_exe(4)


def test_full_disk_degrades_to_a_warning(store: CacheStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk.os, "write", full)
    with pytest.warns(UserWarning, match="disk is full"):
        store.save(fake_key(5), fake_exe(5), {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # only one warning per process
        store.save(fake_key(6), fake_exe(6), {})
    monkeypatch.undo()
    assert not store.disk.writable and store.counters.counts["errors"] >= 1
    assert list(store.disk.temporaries()) == [] and list(store.disk.files()) == []
    assert store.load(fake_key(5)) == fake_exe(5)  # the memory tier still serves


def test_read_only_directory_degrades_to_a_warning(cache_root: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    k = fake_key(7)
    CacheStore(cache_root).save(k, fake_exe(7), {})
    real_open = os.open

    def read_only(path, flags, *a):  # type: ignore[no-untyped-def]
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_open(path, flags, *a)

    monkeypatch.setattr(disk.os, "open", read_only)
    ro = CacheStore(cache_root)
    assert ro.load(k) == fake_exe(7)  # reading still works
    with pytest.warns(UserWarning, match="read-only"):
        ro.save(fake_key(8), fake_exe(8), {})
    assert not ro.disk.path("executable", fake_key(8)).exists()


def test_unusable_directory_is_no_cache_not_a_crash(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.warns(UserWarning, match="cannot write"):
        s = CacheStore(blocker / "cache")
    s.save(fake_key(9), fake_exe(9), {})
    s.link(fake_key("g"), fake_key(9))
    assert s.load(fake_key(9)) == fake_exe(9)  # memory tier only
    assert CacheStore.__name__ and not s.disk.writable


def test_directory_and_files_are_user_only(store: CacheStore, cache_root: Path) -> None:
    store.save(fake_key(10), fake_exe(10), {})
    store.flush()
    for p in [cache_root, *cache_root.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode & 0o077 == 0, f"{p} is {oct(mode)}"


def test_store_version_bump_makes_entries_unreachable(cache_root: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    k = fake_key(11)
    CacheStore(cache_root).save(k, fake_exe(11), {})
    monkeypatch.setattr(entry_format, "STORE_VERSION", 2)
    monkeypatch.setattr(disk, "STORE_VERSION", 2)
    newer = CacheStore(cache_root)
    assert newer.load(k) is None and newer.counters.counts["corrupt"] == 0
    # even a v1 file put where v2 looks is refused by its header
    path = newer.disk.path("executable", k)
    path.parent.mkdir(parents=True)
    monkeypatch.setattr(entry_format, "STORE_VERSION", 1)
    path.write_bytes(entry_format.encode("executable", k, fake_exe(11), {}))
    monkeypatch.setattr(entry_format, "STORE_VERSION", 2)
    with pytest.warns(UserWarning, match="store version"):
        assert newer.load(k) is None


def test_lru_eviction_keeps_recently_used(cache_root: Path) -> None:
    one = len(entry_format.encode("executable", fake_key(0), fake_exe(0, 5000), {}))
    s = CacheStore(cache_root, max_bytes=int(3.5 * one), memory_bytes=0)
    for i in range(3):
        s.save(fake_key(i), fake_exe(i, 5000), {})
        os.utime(s.disk.path("executable", fake_key(i)), (1000 + i, 1000 + i))
    assert s.load(fake_key(0)) is not None  # now the most recently used
    s.save(fake_key(3), fake_exe(3, 5000), {})
    present = {p.name for _, p in s.disk.files()}
    assert fake_key(1) not in present and {fake_key(0), fake_key(2), fake_key(3)} <= present
    assert sum(size for _, size, _ in s.disk.usage()) <= s.disk.max_bytes
    assert s.counters.counts["evictions"] == 1


def test_memory_tier_is_bounded_in_bytes(cache_root: Path) -> None:
    s = CacheStore(cache_root, memory_bytes=5000)
    for i in range(5):
        s.save(fake_key(i), fake_exe(i, 2000), {})
    assert s.memory.bytes_used <= 5000 and len(s.memory) == 2


def test_default_store_follows_settings(tmp_path: Path) -> None:
    from torchneuron.cache import default_store
    from torchneuron.hardware import settings

    with settings.override(cache_dir=str(tmp_path / "a")):
        a = default_store()
        assert a is not None and a.root == tmp_path / "a" and default_store() is a
        with settings.override(cache=False):
            assert default_store() is None
        with settings.override(cache_max_size=12345):
            assert default_store().disk.max_bytes == 12345  # type: ignore[union-attr]


def test_default_directory_honours_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from torchneuron.cache import cache_dir
    from torchneuron.hardware import settings

    with settings.override(cache_dir=""):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        assert cache_dir() == tmp_path / "torchneuron"
        monkeypatch.delenv("XDG_CACHE_HOME")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert cache_dir() == tmp_path / "home" / ".cache" / "torchneuron"


def test_per_process_count_files_are_folded_without_losing_counts(tmp_path: Path) -> None:
    import json

    from torchneuron.cache.counters import Counters

    folder = tmp_path / "stats"
    folder.mkdir()
    for i in range(80):  # 80 finished processes, one hit each
        (folder / f"host-{i}.json").write_text(json.dumps({"hits": 1, "writes": 2}))
    c = Counters(folder)
    c.add("misses", 5)
    c.flush()
    assert len(list(folder.glob("*.json"))) == 2  # this process's file and the folded one
    totals = read_totals(folder)
    assert (totals["hits"], totals["writes"], totals["misses"]) == (80, 160, 5)
