"""``torchneuron-bench --steps auto``: each model's adaptive run goes on until adaptive
eager's last tier is in, the model's other modes run as many steps, and a cap says so.

One end-to-end run (the MLP, compile latency zeroed by ``tests/conftest.py``, so the
compiled programs are in within a few steps) checks the stop rule against adaptive
eager's own ``stats()``; the rest are cheap checks of the parts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchneuron.bench import report
from torchneuron.bench._runtime import last_tier_in
from torchneuron.bench.cli import main, resolve_steps
from torchneuron.bench.runner import AUTO_TAIL
from torchneuron.bench.suite import AUTO, specs_for

ROOT = Path(__file__).resolve().parents[2]
ADAPTIVE = importlib.util.find_spec("torchneuron.adaptive_eager") is not None


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "torchneuron.bench", "--no-progress", *args],
                          capture_output=True, text=True, env=env, timeout=900, check=False)


@pytest.mark.skipif(not ADAPTIVE, reason="adaptive eager is not in this tree")
def test_auto_runs_until_the_last_tier_is_in_and_every_mode_as_long(tmp_path: Path) -> None:
    proc = _bench("--models", "mlp", "--modes", "eager,adaptive_cold", "--steps", "auto",
                  "--max-steps", "60", "--jobs", "2", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = {r["mode"]: r for r in json.loads((tmp_path / "report.json").read_text())}
    ae, eager = recs["adaptive_cold"], recs["eager"]
    assert ae["status"] == eager["status"] == "ok"
    assert ae["steps_cap"] == 60 and ae["steps_cap_hit"] is False
    assert ae["steps"] == ae["last_tier_step"] + AUTO_TAIL < 60
    assert eager["steps"] == ae["steps"] and len(eager["step_ms"]) == ae["steps"]
    assert eager["steps_cap"] is None and eager["last_tier_step"] is None
    assert last_tier_in(ae["adaptive_stats"])
    # its steady state is that of the steps after the last tier came in
    assert ae["steady_step"] >= ae["last_tier_step"] and ae["steady_reached"]
    assert ae["steady_ms"] == ae["step_ms"][-1]
    md = (tmp_path / "report.md").read_text()
    assert "## --steps auto: steps to adaptive eager's last tier" in md
    assert f"last tier in after step {ae['last_tier_step']}" in md
    # the report judges the whole run (no compile run here: that criterion is not judged)
    checks = ae["whole_run_checks"]
    assert checks["last_tier_in"] is True and checks["steps"] == ae["steps"]
    assert checks["at_or_below_eager"] is (ae["below_eager_from"] is not None
                                           and ae["below_eager_from"] <= 5)
    assert checks["met"] is False and "no compile run" in checks["why_not_judged"]
    assert "## Adaptive eager over the whole run: issue 20's criteria" in md


def test_the_stop_rule_reads_adaptive_eagers_stats() -> None:
    st = {"replays": 5, "first_tier_replays": 5, "regions_by_state": {"ready": 1}}
    assert not last_tier_in(st)  # only first-tier replays so far
    assert last_tier_in(dict(st, replays=6))
    assert not last_tier_in(dict(st, replays=6, regions_by_state={"compiling": 1}))
    assert not last_tier_in(dict(st, replays=6, regions_by_state={"hot": 1}))
    assert last_tier_in(dict(st, replays=6, regions_by_state={"aborted": 2, "recording": 1}))
    assert not last_tier_in(None)


def test_a_hit_cap_is_reported() -> None:
    rec = {"model": "mlp", "mode": "adaptive_cold", "status": "ok", "steps": 50,
           "steps_cap": 50, "steps_cap_hit": True, "last_tier_step": None,
           "adaptive_stats": {"replays": 47, "first_tier_replays": 47,
                              "regions_by_state": {"compiling": 1, "recording": 2}}}
    line = report.auto_steps_line(rec)
    assert line.startswith("adaptive_cold: CAP HIT, stopped at --max-steps 50")
    assert "compiled-program replays 0" in line and "compiling 1" in line


def test_specs_pace_every_mode_on_the_adaptive_run(tmp_path: Path) -> None:
    specs = {s["mode"]: s for s in specs_for(
        ["mlp"], ["eager", "adaptive_cold", "adaptive_warm", "compile"], AUTO, "trn2",
        tmp_path, tmp_path, False, max_steps=77)}
    assert specs["adaptive_cold"]["auto"] and specs["adaptive_cold"]["steps"] == 77
    assert specs["adaptive_cold"]["after"] is None
    for mode in ("eager", "adaptive_warm", "compile"):
        assert not specs[mode]["auto"]
        assert specs[mode]["steps_from"] == specs[mode]["after"] == "adaptive_cold"
    with pytest.raises(ValueError, match="needs adaptive_cold or adaptive_warm"):
        specs_for(["mlp"], ["eager"], AUTO, "trn2", tmp_path, tmp_path, False)


def test_auto_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert resolve_steps(AUTO, quick=True) == AUTO
    assert main(["--models", "mlp", "--modes", "eager", "--steps", "auto"]) == 2
    assert "--steps auto needs adaptive_cold or adaptive_warm" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["--steps", "many"])
    assert exc.value.code == 2
    assert "--steps takes a number or 'auto'" in capsys.readouterr().err


def test_when_the_pacing_run_dies_its_followers_say_why(tmp_path: Path) -> None:
    from torchneuron.bench._pool import run_all

    base = {"model": "no-such-model", "hardware": "trn2", "steps": 5}
    specs = [dict(base, mode="adaptive_cold", auto=True, after=None,
                  record_path=str(tmp_path / "a.json")),
             dict(base, mode="eager", steps_from="adaptive_cold", after="adaptive_cold",
                  record_path=str(tmp_path / "b.json"))]
    seen: list[str] = []
    pacer, follower = run_all(specs, 1, 60, lambda r: seen.append(r["mode"]))
    assert pacer["status"] == "crashed"
    assert follower["status"] == "not run" and seen == ["adaptive_cold", "eager"]
    assert follower["reason"] == ("--steps auto: the adaptive_cold run that sets the steps "
                                  "ended crashed with no step")
