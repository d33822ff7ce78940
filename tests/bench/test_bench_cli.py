"""``torchneuron-bench`` end to end, in fresh processes as a user runs it.

One run with every mode on the MLP (torch.compile included, with ``--trace``) checks the
report's structure, its figures against each other and the trace files; two ``--quick``
runs of the cheap modes check that simulated figures repeat exactly. Compile latency
follows the environment (``tests/conftest.py`` zeroes it), as the report says.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchneuron.bench import MODES, SIMULATED, schema
from torchneuron.bench._pool import _fork_one
from torchneuron.bench.cli import main, resolve_steps
from torchneuron.bench.suite import DEFAULT_STEPS, QUICK_STEPS

ROOT = Path(__file__).resolve().parents[2]
ADAPTIVE = importlib.util.find_spec("torchneuron.adaptive_eager") is not None


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "torchneuron.bench", "--no-progress", *args],
                          capture_output=True, text=True, env=env, timeout=900, check=False)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    proc = _bench("--models", "mlp", "--steps", "3", "--trace", "--jobs", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _records(out: Path) -> dict[str, dict]:
    recs = json.loads((out / "report.json").read_text())
    assert isinstance(recs, list)
    return {r["mode"]: r for r in recs}


def test_one_record_per_model_and_mode_with_every_field(full_run: Path) -> None:
    recs = json.loads((full_run / "report.json").read_text())
    assert [(r["model"], r["mode"]) for r in recs] == [("mlp", m) for m in MODES]
    for r in recs:
        assert list(r) == list(schema.FIELDS)
        assert schema.validate(r) == [], (r["mode"], schema.validate(r))


def test_figures_agree_with_each_other(full_run: Path) -> None:
    recs = _records(full_run)
    eager, compiled, cpu = recs["eager"], recs["compile"], recs["cpu"]
    for r in (eager, compiled, cpu):
        assert r["status"] == "ok", r["reason"]
    assert eager["step_ms"][eager["steady_step"]:] == [eager["steady_ms"]] * (
        3 - eager["steady_step"])
    assert eager["speedup_vs_eager"] == 1.0 and eager["max_abs_diff_vs_eager"] == 0.0
    assert compiled["speedup_vs_eager"] == round(eager["steady_ms"] / compiled["steady_ms"], 4)
    assert compiled["gap_closed"] == 1.0
    assert compiled["graphs_compiled"] >= 2 and compiled["executables"] >= 2  # fwd + bwd
    assert compiled["executable_launches"] == 3 * compiled["executables"]
    assert compiled["roofline_pct"] >= 100 and eager["roofline_pct"] is None
    assert compiled["max_abs_diff_vs_eager"] < 1e-4
    assert cpu["max_abs_diff_vs_eager"] < 1e-4 and cpu["step_ms"] is None
    assert cpu["host_us_per_op"] == round(cpu["host_wall_ms_per_step"] * 1e3 /
                                          eager["ops_per_step"], 2)
    assert eager["compile_ms_critical_path"] == 0.0  # the tests zero compile latency


def test_adaptive_modes_run_or_say_why(full_run: Path) -> None:
    recs = _records(full_run)
    for mode in ("adaptive_cold", "adaptive_warm"):
        r = recs[mode]
        if ADAPTIVE:
            assert r["status"] == "ok", r["reason"]
            assert r["adaptive_stats"] is not None and r["max_abs_diff_vs_eager"] < 1e-4
        else:
            assert r["status"] == "not run"
            assert r["reason"] == ("ModuleNotFoundError: No module named "
                                   "'torchneuron.adaptive_eager'")


def test_markdown_chart_and_traces(full_run: Path) -> None:
    md = (full_run / "report.md").read_text()
    assert "| model | mode | first step ms |" in md and "| mlp | compile |" in md
    assert "TORCHNEURON_COMPILE_LATENCY=False" in md  # the settings in force
    assert "host_dispatch_ns = 15000 (assumed)" in md  # which figures are assumptions
    assert (full_run / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (full_run / "cumulative.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## The whole run: cumulative simulated time" in md
    recs = _records(full_run)
    for mode in ("eager", "compile"):
        trace = json.loads((full_run / recs[mode]["trace"]).read_text())
        cats = {e.get("cat") for e in trace["traceEvents"]}
        assert {"host", "kernel", "engine"} <= cats
        assert ("executable" in cats) == (mode == "compile")
    assert recs["cpu"]["trace"] is None


@pytest.mark.slow
def test_quick_simulated_figures_repeat_exactly(full_run: Path, tmp_path: Path) -> None:
    """The same command again (a representative subset of ``--quick``: the MLP in every
    mode) gives the same simulated figures, to the nanosecond, whatever the wall clock did."""
    proc = _bench("--models", "mlp", "--steps", "3", "--jobs", "2", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads((tmp_path / "report.json").read_text())
    first = json.loads((full_run / "report.json").read_text())
    for a, b in zip(first, again, strict=True):
        assert {k: a[k] for k in SIMULATED} == {k: b[k] for k in SIMULATED}, a["mode"]
    assert sum(1 for r in first if r["step_ms"]) >= 2


def test_quick_flag_sets_the_ci_steps() -> None:
    assert resolve_steps(None, quick=True) == QUICK_STEPS
    assert resolve_steps(None, quick=False) == DEFAULT_STEPS > QUICK_STEPS
    assert resolve_steps(3, quick=True) == 3


def test_bad_arguments_and_list(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--models", "resnet"])
    assert exc.value.code == 2
    assert "unknown model resnet; valid: mlp" in capsys.readouterr().err
    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert "hf_gpt2" in listed and "adaptive_warm" in listed


def test_a_run_that_dies_is_reported_crashed(tmp_path: Path) -> None:
    spec = {"model": "no-such-model", "mode": "eager", "hardware": "trn2",
            "record_path": str(tmp_path / "r.json")}
    rec = _fork_one(spec, timeout=60)
    assert rec["status"] == "crashed"
    assert rec["reason"] == "the benchmark process exited with code 1 without a result"
