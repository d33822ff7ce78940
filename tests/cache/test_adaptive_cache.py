"""Adaptive eager and the compile cache: a second process replays from the cache.

The same training script runs twice in two processes with one cache directory. The
second compiles nothing: its hot region's executable is a cache hit, so it replays
with no compile latency, and its losses are the first process's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]


def _run(cache_dir: Path, latency: str) -> dict[str, Any]:
    env = {**os.environ, "TORCHNEURON_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(_ROOT),
           "TORCHNEURON_COMPILE_LATENCY": latency}
    out = subprocess.run([sys.executable, str(_ROOT / "tests/cache/adaptive_script.py")],
                         env=env, capture_output=True, text=True, timeout=600, cwd=_ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_replays_from_the_cache(tmp_path: Path) -> None:
    # Modeled compile latency on: the first process compiles in the background and
    # does not reach its executable within the script's steps; the second needs none.
    first = _run(tmp_path, "1")
    second = _run(tmp_path, "1")
    assert first["compilations"] >= 1 and first["cache_hits"] == 0
    assert second["compilations"] == 0 and second["cache_hits"] >= 1
    assert second["replays"] > 0
    assert second["losses"] == first["losses"]  # replayed steps give eager's numbers
    assert second["times"][-1] < first["times"][-1]  # replay beats eager in simulated time
