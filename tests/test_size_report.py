"""``tools/sz.py`` (run by ``make lint``): lines per module and folder, exit 1 above budget."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import sz  # noqa: E402


def _package(root: Path, sizes: dict[str, int]) -> Path:
    for name, n in sizes.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n" * n)
    return root


def test_counts_lines_per_module_and_folder(tmp_path: Path) -> None:
    root = _package(tmp_path / "pkg", {"a.py": 3, "sub/b.py": 5, "sub/c.py": 2})
    (root / "sub" / "notes.txt").write_text("not a module\n" * 9)
    sizes = sz.module_lines(root)
    assert sizes == {"a.py": 3, "sub/b.py": 5, "sub/c.py": 2}
    assert sz.folder_totals(sizes) == {".": (1, 3), "sub": (2, 7)}


def test_fails_only_above_the_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    root = _package(tmp_path / "pkg", {"small.py": 10, "big.py": 11})
    assert sz.main(["--root", str(root), "--max", "11"]) == 0
    assert sz.main(["--root", str(root), "--max", "10"]) == 1
    out, err = capsys.readouterr()
    assert "big.py" in err and "small.py" not in err and "over 10" in out
