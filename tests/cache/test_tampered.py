"""Tampered executables: edited in place with a valid checksum, linked from another graph,
or brought in by ``import``.

Content addressing: the key is recomputed from an entry's own content and its program is
rebuilt from its StableHLO, so an edit is a counted miss (discarded and rebuilt) and the
numbers are eager PyTorch's on CPU, as with ``TORCHNEURON_CACHE=0``.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
import torch

from torchneuron.cache import CacheStore, cli
from torchneuron.cache import entry as entry_format
from torchneuron.compiler import compile_graph, reset_stats, stats
from torchneuron.compiler.keys import index_key
from torchneuron.compiler.pipeline import load_cached
from torchneuron.hardware import current_profile


def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w) + 1


def _xs(rows: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(rows, 8, generator=g), torch.randn(8, 3, generator=g)]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("tampered") / "cache"
    exe = compile_graph(f, _xs(), store=CacheStore(root), graph_key="g", in_process=True)
    return root, exe.cache_key or ""


@pytest.fixture
def cache(template: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    shutil.copytree(template[0], tmp_path / "cache")
    reset_stats()
    return tmp_path / "cache", template[1]


def _edit(root: Path, key: str, how: str) -> bytes:
    """Rewrite the executable under ``key`` with a valid header (size, sha256)."""
    path = CacheStore(root).disk.path("executable", key)
    d = json.loads(entry_format.decode(path.read_bytes()).payload)
    body = d["program"]["module"]["functions"]["main"]["body"]
    if how == "constant":
        next(op for op in body if op["name"] == "stablehlo.constant")[
            "attributes"]["value"]["splat"] = 2.0
    elif how == "add-to-subtract":
        next(op for op in body if op["name"] == "stablehlo.add")["name"] = "stablehlo.subtract"
    elif how == "unknown-op":
        next(op for op in body if op["name"] == "stablehlo.tanh")["name"] = "stablehlo.nosuchop"
    elif how == "signature":
        d["signature"]["write_backs"] = [[0, 0]]
    payload = json.dumps(d).encode()
    path.write_bytes(entry_format.encode("executable", key, payload, {}))
    return payload


@pytest.mark.parametrize("how", ["constant", "add-to-subtract", "unknown-op", "signature"])
def test_an_edited_executable_is_a_counted_miss_and_rebuilt(cache: tuple[Path, str],
                                                             how: str) -> None:
    root, key = cache
    _edit(root, key, how)
    with pytest.warns(UserWarning, match="does not load"):
        exe = compile_graph(f, _xs(), store=CacheStore(root), graph_key="g", in_process=True)
    assert not exe.from_cache and stats()["cache"]["corrupt"] == 1
    torch.testing.assert_close(exe.run(_xs())[0], f(*_xs()), rtol=0, atol=0)
    again = compile_graph(f, _xs(), store=CacheStore(root), graph_key="g", in_process=True)
    assert again.from_cache  # the rebuilt entry replaced the edited one


def test_adaptive_eagers_look_up_refuses_an_edited_executable(cache: tuple[Path, str]) -> None:
    """``load_cached`` (adaptive eager's warm path) makes the same check: with its
    first-replay verification off, nothing else would catch an edit."""
    root, key = cache
    assert load_cached(CacheStore(root), "g") is not None
    _edit(root, key, "add-to-subtract")
    with pytest.warns(UserWarning, match="not what the neuron compiler makes"):
        assert load_cached(CacheStore(root), "g") is None
    assert not CacheStore(root).disk.path("executable", key).exists()  # discarded


@pytest.mark.parametrize("how", ["constant", "unknown-op"])
def test_verify_finds_an_edited_executable_and_fix_removes_it(cache: tuple[Path, str],
                                                              how: str, capsys: Any) -> None:
    root, key = cache
    _edit(root, key, how)
    assert cli.main(["--dir", str(root), "verify"]) == 1
    assert key[:16] in capsys.readouterr().out
    assert cli.main(["--dir", str(root), "verify", "--fix"]) == 0
    assert not CacheStore(root).disk.path("executable", key).exists()
    assert cli.main(["--dir", str(root), "verify"]) == 0  # its link went with it


def test_a_link_to_another_graphs_executable_is_a_counted_miss(cache: tuple[Path, str]) -> None:
    root, key = cache
    store = CacheStore(root)
    other = index_key("other", current_profile().name, {})
    store.disk.write("link", other, key.encode(), {"kind": "link"})  # planted
    xs = _xs(rows=2)
    with pytest.warns(UserWarning, match="other inputs"):
        exe = compile_graph(f, xs, store=CacheStore(root), graph_key="other", in_process=True)
    assert not exe.from_cache
    torch.testing.assert_close(exe.run(xs)[0], f(*xs), rtol=0, atol=0)
    assert store.disk.path("executable", key).exists()  # the intact executable stays
    assert compile_graph(f, xs, store=CacheStore(root), graph_key="other",
                         in_process=True).from_cache  # relinked to its own executable


def _archive(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_import_refuses_tampered_deep_and_dangling_entries(cache: tuple[Path, str],
                                                           tmp_path: Path, capsys: Any) -> None:
    root, key = cache
    payload = _edit(root, key, "constant")
    fresh = tmp_path / "fresh"
    deep_key = "d" * 64
    members = {
        "executable/edited": entry_format.encode("executable", key, payload, {}),
        "executable/deep": entry_format.encode("executable", deep_key,
                                               b"[" * 50_000 + b"]" * 50_000, {}),
        "link/dangling": entry_format.encode("link", "e" * 64, ("f" * 64).encode(),
                                             {"kind": "link"}),
    }
    _archive(tmp_path / "hostile.tar.gz", members)
    assert cli.main(["--dir", str(fresh), "import", str(tmp_path / "hostile.tar.gz")]) == 1
    out = capsys.readouterr().out
    assert "imported 0" in out and "rejected 3" in out
    assert not CacheStore(fresh).disk.path("executable", key).exists()
