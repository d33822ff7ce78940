"""Every ``torchneuron-cache`` subcommand, as a table and as ``--json``, on a real cache.

The cache holds two executables compiled by ``compile_graph`` and their links. JSON
output is always a list of objects each with ``key``; destructive commands honour
``--dry-run`` and, without a terminal, refuse to act without ``--yes`` (exit 3).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import torch

from torchneuron.cache import CacheStore, cli
from torchneuron.cache.inventory import list_entries
from torchneuron.compiler import compile_graph


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("template") / "cache"
    store = CacheStore(root)
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    compile_graph(lambda a, b: torch.relu(a @ b), [x, w], name="small", store=store,
                  graph_key="g-small", in_process=True)
    compile_graph(lambda a, b: torch.sigmoid(a @ b @ b.T @ b) * 3, [x, w], name="big",
                  store=store, graph_key="g-big", in_process=True)
    store.flush()
    return root


@pytest.fixture
def root(template: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "cache"
    shutil.copytree(template, dst)
    return dst


def run(root: Path, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["--dir", str(root), *argv])
    return code, capsys.readouterr().out


def run_json(root: Path, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code, out = run(root, *argv, "--json", capsys=capsys)
    data = json.loads(out)
    assert isinstance(data, list) and all("key" in d for d in data)
    return code, data


def _exes(root: Path) -> list[Any]:
    return [r for r in list_entries(CacheStore(root).disk) if r.kind == "executable"]


def test_dir(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(root, "dir", capsys=capsys) == (0, f"{root}\n")
    assert run_json(root, "dir", capsys=capsys)[1][0]["path"] == str(root)


def test_stats_and_zero(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(root, "stats", capsys=capsys)
    assert code == 0 and "executables      2" in out and "writes           4" in out
    code, data = run_json(root, "stats", capsys=capsys)
    values = {d["key"]: d["value"] for d in data}
    assert values["executables"] == 2 and values["links"] == 2 and values["writes"] == 4
    _, data = run_json(root, "stats", "--zero", capsys=capsys)
    assert {d["key"]: d["value"] for d in data}["writes"] == 0


def test_ls_sort_filter_limit(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(root, "ls", capsys=capsys)
    assert code == 0 and out.splitlines()[0].startswith("KEY") and len(out.splitlines()) == 5
    _, rows = run_json(root, "ls", "--sort", "size", "--filter", "kind=executable", capsys=capsys)
    assert [r["name"] for r in rows] == ["big", "small"]
    assert rows[0]["size"] >= rows[1]["size"] and rows[0]["target"] == "trn2"
    _, rows = run_json(root, "ls", "--sort", "key", "--limit", "3", capsys=capsys)
    assert [r["key"] for r in rows] == sorted(r["key"] for r in rows) and len(rows) == 3
    _, rows = run_json(root, "ls", "--filter", "name~SMA", capsys=capsys)
    assert [r["name"] for r in rows] == ["small"]
    _, rows = run_json(root, "ls", "--filter", "size>1GB", capsys=capsys)
    assert rows == []
    _, rows = run_json(root, "ls", "--filter", "kind=link", "--filter", "compatible=true",
                       capsys=capsys)
    assert len(rows) == 2 and all(r["links_to"] for r in rows)
    assert run(root, "ls", "--filter", "nonsense", capsys=capsys)[0] == cli.USAGE


def test_info(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = next(r for r in _exes(root) if r.meta["name"] == "big")
    code, out = run(root, "info", big.key[:10], capsys=capsys)
    assert code == 0
    for text in ("key components:", "stablehlo_sha256", "compiler_version", "target",
                 "StableHLO (excerpt):", "stablehlo.dot_general", "kernels (",
                 "schedule and cost:", "total", "on device"):
        assert text in out, text
    _, (data,) = run_json(root, "info", big.key, capsys=capsys)
    assert data["key"] == big.key and data["kind"] == "executable"
    assert set(data["components"]) == {"stablehlo_sha256", "signature_sha256",
                                       "compiler_version", "format_version", "target", "options"}
    assert data["kernels"] and data["cost"]["total_ns"] > 0 and data["payload_bytes"] > 0
    link = next(r for r in list_entries(CacheStore(root).disk) if r.kind == "link")
    code, out = run(root, "info", link.key, capsys=capsys)
    assert code == 0 and "links to" in out
    assert run(root, "info", "ffffffffff", capsys=capsys)[0] == cli.FAILED


def test_rm(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = next(r for r in _exes(root) if r.meta["name"] == "small")
    code, out = run(root, "rm", small.key[:12], capsys=capsys)
    assert code == 0 and "removed 1 entries" in out and len(_exes(root)) == 1
    big = _exes(root)[0]
    code, data = run_json(root, "rm", big.key, "0000000000", capsys=capsys)
    assert code == cli.FAILED and [d["key"] for d in data] == [big.key] and _exes(root) == []


def test_prune_dry_run_confirmation_and_yes(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(root, "prune", "--max-size", "0", "--dry-run", capsys=capsys)
    assert code == 0 and "would remove 2 entries" in out and len(_exes(root)) == 2
    code, data = run_json(root, "prune", "--max-size", "0", "--dry-run", capsys=capsys)
    assert len(data) == 2 and not any(d["removed"] for d in data)
    assert run(root, "prune", "--max-size", "0", capsys=capsys)[0] == cli.NEEDS_YES
    assert len(_exes(root)) == 2
    code, data = run_json(root, "prune", "--max-size", "0", "--yes", capsys=capsys)
    assert code == 0 and all(d["removed"] for d in data) and _exes(root) == []


def test_prune_older_than(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = next(r for r in _exes(root) if r.meta["name"] == "small")
    os.utime(small.path, (1, 1))  # unused since 1970
    _, data = run_json(root, "prune", "--older-than", "30d", "--dry-run", capsys=capsys)
    assert [d["key"] for d in data] == [small.key]
    assert run(root, "prune", "--older-than", "30d", "--yes", capsys=capsys)[0] == 0
    assert [r.meta["name"] for r in _exes(root)] == ["big"]
    assert run(root, "prune", "--older-than", "soon", capsys=capsys)[0] == cli.USAGE


def test_clear(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(root, "clear", "--dry-run", capsys=capsys)
    assert code == 0 and "would remove 4 entries" in out and len(_exes(root)) == 2
    _, data = run_json(root, "clear", "--dry-run", capsys=capsys)
    assert len(data) == 4
    assert run(root, "clear", capsys=capsys)[0] == cli.NEEDS_YES and len(_exes(root)) == 2
    code, data = run_json(root, "clear", "--yes", capsys=capsys)
    assert code == 0 and len(data) == 4 and list_entries(CacheStore(root).disk) == []


def test_verify_and_fix(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(root, "verify", capsys=capsys)
    assert code == 0 and "4 entries checked, 0 problems" in out
    victim = _exes(root)[0]
    victim.path.write_bytes(victim.path.read_bytes()[:-5])
    code, data = run_json(root, "verify", capsys=capsys)  # the entry, and the link to it
    assert code == cli.FAILED and [d["kind"] for d in data] == ["executable", "link"]
    assert data[0]["key"] == victim.key and "truncated" in data[0]["problem"]
    assert "not in the cache" in data[1]["problem"] and not data[0]["fixed"]
    code, out = run(root, "verify", "--fix", capsys=capsys)
    assert code == 0 and "truncated" in out and not victim.path.exists()
    assert run_json(root, "verify", capsys=capsys) == (0, [])


def test_export_import_round_trip(root: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    archive = tmp_path / "warm.tar.gz"
    code, out = run(root, "export", str(archive), capsys=capsys)
    assert code == 0 and "exported 4 entries" in out
    other = tmp_path / "other"
    code, data = run_json(other, "import", str(archive), capsys=capsys)
    assert code == 0 and sorted(d["status"] for d in data) == ["imported"] * 4
    assert sorted(r.key for r in _exes(other)) == sorted(r.key for r in _exes(root))
    code, out = run(other, "import", str(archive), capsys=capsys)
    assert code == 0 and "already present 4" in out
    _, data = run_json(other, "export", str(tmp_path / "again.tar"), capsys=capsys)
    assert data[0]["entries"] == 4


def test_import_validates_entry_by_entry(root: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    archive = tmp_path / "evil.tar"
    good = _exes(root)[0]
    with tarfile.open(archive, "w") as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("../../escaped", good.path.read_bytes())  # the name is never used as a path
        add("executable/" + "a" * 64, good.path.read_bytes()[:-3])  # truncated
        add("executable/pickle", b"\x80\x04K\x01.")
        link = tarfile.TarInfo("link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    other = tmp_path / "other"
    code, data = run_json(other, "import", str(archive), capsys=capsys)
    assert code == cli.FAILED
    assert sorted(d["status"] for d in data) == ["imported", "rejected", "rejected", "rejected"]
    assert [r.key for r in _exes(other)] == [good.key]
    assert not (tmp_path / "escaped").exists() and not (other.parent / "escaped").exists()


def test_module_entry_point_and_help_examples(root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-m", "torchneuron.cache", "--dir", str(root), "ls",
                          "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)) == 4
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices  # type: ignore[union-attr]
    assert set(sub) == {"dir", "stats", "ls", "info", "rm", "prune", "clear", "verify", "export",
                        "import"}
    for name, sp in sub.items():
        assert f"torchneuron-cache {name}" in sp.format_help(), name


def test_prune_incompatible_removes_other_store_versions(root: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    old = root / "v0" / "exe" / "ab"
    old.mkdir(parents=True)
    (old / ("ab" + "0" * 62)).write_bytes(b"an entry of an older store format")
    code, data = run_json(root, "prune", "--incompatible", "--dry-run", capsys=capsys)
    assert code == 0 and data == [] and old.exists()  # current entries are all compatible
    assert run(root, "prune", "--incompatible", "--yes", capsys=capsys)[0] == 0
    assert not (root / "v0").exists() and len(_exes(root)) == 2
