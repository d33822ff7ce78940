"""``torchneuron.compiler.stats()`` / ``explain()`` are available right after
``import torchneuron``, before anything has been compiled (as the README documents)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])

SCRIPT = """
import torchneuron
s = torchneuron.compiler.stats()
assert s["compilations"] == 0 and s["failures"] == 0, s
assert "compilations: 0" in torchneuron.compiler.explain()
torchneuron.compiler.reset_stats()
print("ok")
"""


def test_stats_before_any_compilation_in_a_fresh_process() -> None:
    env = {**os.environ, "PYTHONPATH": _ROOT}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=120, env=env, cwd=_ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
