"""Crash and race tests with real processes sharing one cache directory.

A writer killed with SIGKILL in the middle of a write leaves no entry that loads; two
processes writing the same keys at once leave intact entries; several writers keep the
store within its size bound. No test relies on a lock: there is none.

The writers are forked from the test process (real processes with their own pids and
file descriptors; forking saves each one the seconds of importing torch again).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cache.helpers import fake_exe, fake_key
from torchneuron.cache import CacheStore, disk
from torchneuron.cache import entry as entry_format
from torchneuron.cache.maintenance import verify

_ctx = mp.get_context("fork")


def _run(target: Any, *args: Any) -> Any:
    p = _ctx.Process(target=target, args=args)
    p.start()
    return p


def _join_ok(procs: list[Any], timeout: float = 120) -> None:
    for p in procs:
        p.join(timeout)
        assert p.exitcode == 0, f"writer {p.pid} exited with {p.exitcode}"


def _half_write_then_hang(root: str, key: str, ready: Any) -> None:
    real_write = os.write

    def half_then_hang(fd: int, data: Any) -> int:
        n = real_write(fd, bytes(data[: len(data) // 2]))
        ready.set()
        time.sleep(600)
        return n

    store = CacheStore(root)
    disk.os.write = half_then_hang  # type: ignore[assignment]  (only in this child)
    store.save(key, fake_exe("killed", 200_000), {})


def test_sigkill_mid_write_leaves_no_loadable_partial_entry(tmp_path: Path) -> None:
    root, k, ready = str(tmp_path / "cache"), fake_key("killed"), _ctx.Event()
    p = _run(_half_write_then_hang, root, k, ready)
    assert ready.wait(60), "the writer never reached the middle of its write"
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)
    assert p.exitcode == -signal.SIGKILL
    store = CacheStore(root)
    assert not store.disk.path("executable", k).exists()
    assert len(list(store.disk.temporaries())) == 1  # the torn temporary, never read
    assert store.load(k) is None and store.counters.counts["corrupt"] == 0
    problems = verify(store.disk, fix=True, content=False)
    assert [p.kind for p in problems] == ["temporary"] and problems[0].fixed
    assert list(store.disk.temporaries()) == []


def _save_many(root: str, started: Any) -> None:
    store = CacheStore(root)
    for i in range(1000):
        store.save(fake_key(i), fake_exe(i, 300_000), {})
        if i == 3:
            started.set()


def test_sigkill_at_a_random_moment_leaves_only_intact_entries(tmp_path: Path) -> None:
    root, started = str(tmp_path / "cache"), _ctx.Event()
    p = _run(_save_many, root, started)
    assert started.wait(60)
    time.sleep(0.03)
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)
    store = CacheStore(root)
    files = list(store.disk.files())
    assert len(files) >= 4
    by_key = {fake_key(i): i for i in range(1000)}
    for _, path in files:
        got = entry_format.decode(path.read_bytes(), expect_key=path.name)
        assert got.payload == fake_exe(by_key[path.name], 300_000)


def _write_same_keys(root: str, go: Any) -> None:
    go.wait(30)
    store = CacheStore(root)
    for i in range(40):
        store.save(fake_key(i), fake_exe(i, 20_000), {})
        store.link(fake_key(("g", i)), fake_key(i))
        assert store.load(fake_key(i)) == fake_exe(i, 20_000)


def test_two_processes_writing_the_same_keys(tmp_path: Path) -> None:
    root, go = str(tmp_path / "cache"), _ctx.Event()
    procs = [_run(_write_same_keys, root, go) for _ in range(2)]
    go.set()
    _join_ok(procs)
    store = CacheStore(root)
    for i in range(40):
        assert store.load(fake_key(i)) == fake_exe(i, 20_000)
        assert store.resolve(fake_key(("g", i))) == fake_key(i)
    assert list(store.disk.temporaries()) == [] and verify(store.disk, content=False) == []


def _write_own_keys(root: str, bound: int, w: int, go: Any) -> None:
    go.wait(30)
    store = CacheStore(root, max_bytes=bound)
    for i in range(25):
        store.save(fake_key((w, i)), fake_exe((w, i), 30_000), {})


@pytest.mark.parametrize("writers", [3])
def test_size_bound_holds_with_several_writers(tmp_path: Path, writers: int) -> None:
    root, bound, go = str(tmp_path / "cache"), 400_000, _ctx.Event()
    procs = [_run(_write_own_keys, root, bound, w, go) for w in range(writers)]
    go.set()
    _join_ok(procs)
    store = CacheStore(root, max_bytes=bound)
    assert sum(size for _, size, _ in store.disk.usage()) <= bound
    assert 0 < len(list(store.disk.files())) < writers * 25
    assert verify(store.disk, content=False) == []
