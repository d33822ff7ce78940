"""The cache under the compiler: two processes, version bumps, crafted entries.

The acceptance test runs ``train_script.py`` (torch.compile training) twice in two
processes with one cache directory: the second compiles nothing, finds its
executables as cache hits, and gives identical losses, weights and simulated step
times after the first step.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from torchneuron.cache import CacheStore, cli
from torchneuron.cache import entry as entry_format
from torchneuron.cache.inventory import list_entries
from torchneuron.compiler import compile_graph, reset_stats, stats, versions

_ROOT = Path(__file__).resolve().parents[2]


def _train(cache_dir: Path, steps: int = 3) -> dict[str, Any]:
    env = {**os.environ, "TORCHNEURON_CACHE_DIR": str(cache_dir),
           "PYTHONPATH": str(_ROOT)}
    out = subprocess.run([sys.executable, str(_ROOT / "tests/cache/train_script.py"), str(steps)],
                         env=env, capture_output=True, text=True, timeout=600, cwd=_ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing_and_matches(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    first, second = _train(cache_dir), _train(cache_dir)
    assert first["compilations"] == 2 and first["cache"]["hits"] == 0  # forward, backward
    assert second["compilations"] == 0
    assert second["cache"] == {"hits": 2, "misses": 0, "corrupt": 0}
    assert second["store"]["disk_hits"] == 2 and second["store"]["link_hits"] == 2
    assert second["losses"] == first["losses"] and second["weights"] == first["weights"]
    assert second["times_ns"][1:] == first["times_ns"][1:]  # identical after warm-up
    assert second["times_ns"][0] <= first["times_ns"][0]  # no compile on the way
    assert cli.main(["--dir", str(cache_dir), "verify"]) == 0
    from torchneuron.cache.counters import read_totals

    totals = read_totals(cache_dir / "v1" / "stats")  # persisted by both processes
    assert (totals["hits"], totals["writes"], totals["link_hits"]) == (2, 4, 2)


def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w) + 1


def _xs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(4, 8, generator=g), torch.randn(8, 3, generator=g)]


@pytest.fixture
def store(tmp_path: Path) -> CacheStore:
    reset_stats()
    return CacheStore(tmp_path / "cache")


def test_the_compiler_version_follows_the_source(tmp_path: Path) -> None:
    """An edited lowering must not find its predecessor's executables: the compiler version
    (in every key) carries a digest of the package's source, which any edit changes."""
    from torchneuron import __version__

    tree = tmp_path / "pkg"
    (tree / "sub" / "__pycache__").mkdir(parents=True)
    (tree / "a.py").write_text("x = 1\n")
    (tree / "sub" / "b.py").write_text("y = 2\n")
    first = versions.source_digest(tree)
    (tree / "sub" / "__pycache__" / "b.cpython-311.py").write_text("bytecode\n")
    (tree / "notes.md").write_text("not code\n")
    assert versions.source_digest(tree) == first
    (tree / "sub" / "b.py").write_text("y = 3\n")
    edited = versions.source_digest(tree)
    assert edited != first
    (tree / "sub" / "b.py").rename(tree / "b.py")
    assert versions.source_digest(tree) not in (first, edited)
    assert versions.COMPILER_VERSION == f"{__version__}+src.{versions.source_digest()}"


def test_compiler_version_bump_makes_entries_unreachable(store: CacheStore,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    compile_graph(f, _xs(), store=store, graph_key="g", in_process=True)
    assert compile_graph(f, _xs(), store=store, graph_key="g", in_process=True).from_cache
    monkeypatch.setattr(versions, "COMPILER_VERSION", versions.COMPILER_VERSION + "+next")
    fresh = CacheStore(store.root)
    exe = compile_graph(f, _xs(), store=fresh, graph_key="g", in_process=True)
    assert not exe.from_cache and exe.compiler_version.endswith("+next")
    assert stats()["compilations"] == 2
    rows = list_entries(fresh.disk)
    assert sorted(r.compatible for r in rows) == [False, False, True, True]
    assert cli.main(["--dir", str(store.root), "prune", "--incompatible", "--yes"]) == 0
    assert all(r.compatible for r in list_entries(fresh.disk)) and len(list_entries(fresh.disk)) == 2


class _Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch MARKER",))


def _plant(store: CacheStore, key: str, payload: bytes) -> None:
    """An entry with a valid checksum: what a malicious writer of the folder could make."""
    store.disk.path("executable", key).write_bytes(
        entry_format.encode("executable", key, payload, {}))
    store.memory.clear()


def test_crafted_pickle_entry_runs_nothing(store: CacheStore, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    first = compile_graph(f, _xs(), store=store, graph_key="g", in_process=True)
    _plant(store, first.cache_key or "", pickle.dumps(_Boom()))
    with pytest.warns(UserWarning, match="does not load"):
        exe = compile_graph(f, _xs(), store=CacheStore(store.root), graph_key="g", in_process=True)
    assert not (tmp_path / "MARKER").exists()
    assert not exe.from_cache and stats()["cache"]["corrupt"] == 1
    torch.testing.assert_close(exe.run(_xs())[0], f(*_xs()))


def test_crafted_program_is_a_counted_miss_and_rebuilt(store: CacheStore, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    first = compile_graph(f, _xs(), store=store, graph_key="g", in_process=True)
    d = json.loads(store.load(first.cache_key or "") or b"")
    body = d["program"]["module"]["functions"]["main"]["body"]
    body[0]["name"] = "os.system"
    body[0]["attributes"] = {"value": "touch MARKER", "__reduce__": "os.system"}
    _plant(store, first.cache_key or "", json.dumps(d).encode())
    with pytest.warns(UserWarning, match="op the interpreter does not have"):
        exe = compile_graph(f, _xs(), store=CacheStore(store.root), graph_key="g",
                            in_process=True)
    assert not exe.from_cache and stats()["cache"]["corrupt"] == 1  # a miss, rebuilt...
    torch.testing.assert_close(exe.run(_xs())[0], f(*_xs()))
    assert compile_graph(f, _xs(), store=CacheStore(store.root), graph_key="g",
                         in_process=True).from_cache  # ...and saved over the bad entry
    assert not (tmp_path / "MARKER").exists()


def test_cache_off_switch(tmp_path: Path) -> None:
    from torchneuron.cache import default_store
    from torchneuron.hardware import settings

    with settings.override(cache=False, cache_dir=str(tmp_path / "never")):
        assert default_store() is None
        reset_stats()
        cf = torch.compile(f, backend="neuron")
        x, w = (t.to("neuron") for t in _xs())
        torch.testing.assert_close(cf(x, w).cpu(), f(*_xs()))
        assert stats()["compilations"] == 1 and stats()["cache"]["misses"] == 0
    assert not (tmp_path / "never").exists()
