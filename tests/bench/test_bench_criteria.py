"""Issue 20's whole-run criteria (``bench.criteria``), judged from given per-step times: at
most eager's cumulative time from step 5 on, at most torch.compile's at every step, the
last tier in; the report and ``--judge`` state them. Records are built here, no run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchneuron.bench import criteria, metrics, report, schema
from torchneuron.bench.cli import main


def _rec(mode: str, step_ms: list[float], model: str = "m", **extra: object) -> dict:
    r = schema.empty_record(model, mode)
    r.update(status="ok", steps=len(step_ms), step_ms=step_ms, **extra)
    return r


def _paced(step_ms: list[float], last_tier: int | None) -> dict:
    return _rec("adaptive_cold", step_ms, steps_cap=100, last_tier_step=last_tier,
                steps_cap_hit=last_tier is None)


def test_a_run_below_both_from_the_start_with_its_last_tier_meets_them() -> None:
    ae = _paced([900.0, 3.0, 3.0, 1.0, 1.0, 1.0, 1.0], last_tier=4)
    eager, comp = _rec("eager", [901.0] + [10.0] * 6), _rec("compile", [950.0] + [5.0] * 6)
    c = criteria.whole_run_checks(ae, eager, comp)
    assert c["met"] is True and c["steps"] == 7
    assert c["at_or_below_eager"] is True and c["at_or_below_compile_every_step"] is True
    assert c["most_above_eager"] is None and c["most_above_compile"] is None
    assert c["last_tier_in"] is True and c["why_not_judged"] is None


def test_where_a_run_is_above_is_found_and_fails_the_criterion() -> None:
    # above compile after steps 1 and 2 (+0.5, then +0.75), below from step 3
    ae = _paced([100.5, 10.25, 9.0, 1.0, 1.0, 1.0], last_tier=3)
    comp = _rec("compile", [100.0, 10.0, 10.0, 10.0, 10.0, 10.0])
    eager = _rec("eager", [100.0, 10.0, 10.0, 10.0, 10.0, 10.0])
    c = criteria.whole_run_checks(ae, eager, comp)
    assert c["at_or_below_compile_every_step"] is False
    assert c["most_above_compile"] == [2, pytest.approx(0.75)]
    # above eager only before step 5: that criterion holds
    assert c["at_or_below_eager"] is True and c["most_above_eager"] is None
    assert c["met"] is False
    assert criteria.most_above(ae["step_ms"], eager["step_ms"]) == (2, pytest.approx(0.75))


def test_above_eager_from_step_5_fails_and_a_missed_last_tier_fails() -> None:
    eager = _rec("eager", [10.0] * 8)
    ae = _paced([9.0, 9.0, 9.0, 9.0, 9.0, 20.0, 1.0, 1.0], last_tier=None)
    c = criteria.whole_run_checks(ae, eager, None)
    assert c["at_or_below_eager"] is False and c["most_above_eager"] == [6, 5.0]
    assert c["last_tier_in"] is False and c["met"] is False
    assert "no compile run" in c["why_not_judged"]


def test_runs_of_different_lengths_are_not_judged() -> None:
    ae = _paced([1.0] * 5, last_tier=2)
    c = criteria.whole_run_checks(ae, _rec("eager", [2.0] * 4), _rec("compile", [2.0] * 5))
    assert c["at_or_below_eager"] is None and c["met"] is False
    assert c["why_not_judged"] == "eager ran 4 steps, this run 5"
    unpaced = criteria.whole_run_checks(_rec("adaptive_cold", [1.0] * 5),
                                        _rec("eager", [2.0] * 5), _rec("compile", [2.0] * 5))
    assert unpaced["last_tier_in"] is None and unpaced["met"] is False


def test_fill_derive_and_the_report_state_them(tmp_path: Path) -> None:
    eager, comp = _rec("eager", [100.0, 10.0, 10.0]), _rec("compile", [99.0, 5.0, 5.0])
    ae = _paced([99.5, 1.0, 1.0], last_tier=1)  # above compile after step 1 by 0.5
    records = [eager, ae, comp]
    metrics.derive(records)
    criteria.fill(records)
    assert eager["whole_run_checks"] is None and comp["whole_run_checks"] is None
    assert ae["whole_run_checks"]["most_above_compile"] == [1, 0.5]
    assert ae["below_compile_from"] == 2 and ae["cumulative_ms"] == {"1": 99.5, "3": 101.5}
    rows = report.criteria_rows(records)
    assert rows == [["m", "adaptive_cold", "3", "yes", "never", "NO", "+0.500 ms after step 1",
                     "yes (after step 1)", "NO"]]
    path = tmp_path / "report.json"
    report.write_json(records, path)
    assert json.loads(path.read_text())[1]["whole_run_checks"]["met"] is False
    assert main(["--judge", str(path)]) == 1
    ae["step_ms"] = [98.0, 1.0, 1.0]
    report.write_json(records, path)
    assert main(["--judge", str(path)]) == 0


def test_cumulative_figures_need_no_steady_state() -> None:
    eager = _rec("eager", [10.0, 10.0, 10.0], steady_ms=10.0)
    ae = _rec("adaptive_cold", [9.0, 12.0, 3.0])  # steps not settled: steady_ms None
    metrics.derive([eager, ae])
    assert ae["cumulative_ms"] == {"1": 9.0, "3": 24.0} and ae["below_eager_from"] == 3  # above after step 2
    assert ae["speedup_vs_eager"] is None
