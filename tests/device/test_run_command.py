"""``python -m torchneuron.run script.py`` runs the script as ``python script.py`` would.

Why: a training script usually imports modules that sit next to it (``from model
import Net``); ``python script.py`` makes that work by putting the script's folder
first on ``sys.path``, and ``runpy.run_path`` alone does not (``ModuleNotFoundError``).
The script's arguments, ``__name__`` and exit status must be those of a plain run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


def _write_project(folder: Path) -> Path:
    folder.mkdir()
    (folder / "sibling.py").write_text("VALUE = 41\n")
    script = folder / "train.py"
    script.write_text(
        "import sys\n"
        "import sibling\n"
        "import torch\n"
        "import torchneuron  # noqa: F401\n"
        "x = torch.ones(2, device='neuron') * sibling.VALUE\n"
        "print('ran', __name__, sys.argv[1:], int(x.sum().item()))\n"
        "sys.exit(3)\n"
    )
    return script


def test_script_imports_its_siblings_gets_its_args_and_keeps_its_exit_status(
    tmp_path: Path,
) -> None:
    script = _write_project(tmp_path / "project")
    env = dict(os.environ, PYTHONPATH=str(_ROOT), TORCHNEURON_CACHE="0")
    results = {}
    for how, cmd in (
        ("plain", [sys.executable, str(script), "a", "--b"]),
        ("run", [sys.executable, "-m", "torchneuron.run", str(script), "a", "--b"]),
    ):  # fmt: skip
        out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        results[how] = (out.returncode, out.stdout)
    assert results["plain"] == (3, "ran __main__ ['a', '--b'] 82\n")
    assert results["run"] == results["plain"]
