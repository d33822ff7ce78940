"""``tools/host_instructions.py`` (callgrind's host instructions of steady steps): reading
callgrind's out files and the replay / eager table. Valgrind itself is not run here (slow)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import host_instructions as hi  # noqa: E402

_HEAD = "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\ncmd:  python x.py\n"


def _dump(path: Path, part: int, total: int, *, summary_only: bool = False) -> None:
    body = f"{_HEAD}part: {part}\nevents: Ir\nfn=(1) main\n1 {total}\n\nsummary: {total}\n"
    path.write_text(body if summary_only else body + f"totals: {total}\n")


def test_reads_totals_else_summary() -> None:
    assert hi.callgrind_total(f"{_HEAD}summary: 7\ntotals: 12345\n") == 12345
    assert hi.callgrind_total(f"{_HEAD}summary: 678\n") == 678
    with pytest.raises(ValueError, match="totals"):
        hi.callgrind_total(_HEAD)


def test_parts_in_dump_order(tmp_path: Path) -> None:
    # callgrind names the dump at exit `out` and the earlier ones `out.1`, `out.2`
    out = tmp_path / "callgrind.out"
    _dump(out, 3, 30)
    _dump(tmp_path / "callgrind.out.1", 1, 10)
    _dump(tmp_path / "callgrind.out.2", 2, 20, summary_only=True)
    _dump(tmp_path / "callgrind.out2", 1, 999)  # another run's file: not a part of this one
    assert hi.callgrind_parts(out) == [10, 20, 30]


def test_table_gives_replay_over_eager() -> None:
    rows = [{"loop": "cnn", "mode": m, "instructions": n, "steady": s, "ae": {}}
            for m, n, s in (("eager", 200_000_000, "eager"), ("adaptive", 150_000_000, "replaying"))]
    text = hi.table(rows)
    assert "200.00M" in text and "150.00M" in text
    assert "cnn             replay / eager 150.00M / 200.00M = 0.750x" in text
