"""First use of ``torchneuron-cache`` export/import with a bad file: a one-line error
naming the file and exit code 1, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchneuron.cache import cli


@pytest.mark.parametrize("case", ["missing", "not-an-archive", "a-directory"])
def test_import_of_a_bad_file_says_so(tmp_path: Path, case: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    f = {"missing": tmp_path / "nope.tar.gz", "a-directory": tmp_path,
         "not-an-archive": tmp_path / "junk.tar.gz"}[case]
    if case == "not-an-archive":
        f.write_text("not a tar file")
    assert cli.main(["--dir", str(tmp_path / "cache"), "import", str(f)]) == cli.FAILED
    err = capsys.readouterr().err
    assert err.startswith("torchneuron-cache import: cannot use ") and str(f) in err
    assert len(err.strip().splitlines()) == 1


def test_export_to_a_missing_directory_says_so(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "no" / "such" / "dir.tar.gz"
    assert cli.main(["--dir", str(tmp_path / "cache"), "export", str(f)]) == cli.FAILED
    err = capsys.readouterr().err
    assert "cannot use" in err and "No such file or directory" in err
