"""``torchneuron-cache`` tells the truth: a removal that did not happen is exit 1 naming
the path and the reason; out-of-range arguments are usage errors (exit 2); and
``torchneuron-bench --out`` of an existing file is a one-line error.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from tests.cache.helpers import fake_exe, fake_key
from torchneuron.cache import CacheStore, cli


@pytest.fixture
def root(cache_root: Path) -> Path:
    s = CacheStore(cache_root)
    for i in range(4):
        s.save(fake_key(i), fake_exe(i), {})
    s.flush()
    return cache_root


@pytest.fixture
def read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unlink fails as on a read-only file system (chmod does not stop root)."""
    def refuse(path: Any, *a: Any, **k: Any) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(os, "unlink", refuse)
    monkeypatch.setattr(os, "remove", refuse)


@pytest.mark.parametrize("argv", [["rm", fake_key(1)[:10]], ["prune", "--max-size", "0", "--yes"],
                                  ["clear", "--yes"]])
def test_a_removal_that_did_not_happen_is_an_error(root: Path, read_only: None, argv: list[str],
                                                   capsys: Any) -> None:
    assert cli.main(["--dir", str(root), *argv]) == 1
    err = capsys.readouterr().err
    assert "Read-only file system" in err and str(root) in err
    assert len(list(CacheStore(root).disk.files())) == 4


@pytest.mark.parametrize("argv", [["ls", "--limit", "-1"], ["prune", "--max-size", "-5",
                                                             "--dry-run"],
                                  ["prune", "--max-size", "-1kB", "--yes"]])
def test_out_of_range_arguments_are_usage_errors(root: Path, argv: list[str]) -> None:
    assert cli.main(["--dir", str(root), *argv]) == 2
    assert len(list(CacheStore(root).disk.files())) == 4


def test_bench_out_of_an_existing_file_is_one_line(tmp_path: Path, capsys: Any) -> None:
    from torchneuron.bench import cli as bench_cli

    f = tmp_path / "results"
    f.write_text("not a folder")
    assert bench_cli.main(["--out", str(f), "--no-progress", "--models", "mlp",
                           "--modes", "eager", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(f) in err and "Traceback" not in err
    assert f.read_text() == "not a folder"
