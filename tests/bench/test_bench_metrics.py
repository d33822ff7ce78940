"""Derived figures: steady state, differences, speedups and the share of the gap closed."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from torchneuron.bench import metrics, schema


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([900.0, 5.0, 5.0, 5.0], (1, 5.0, True)),
        ([900.0, 60.0, 5.0, 5.0, 5.1], (2, 5.0, True)),
        ([900.0, 5.0, 5.0, 2.0], (None, None, False)),  # the last step changed regime
        ([1.0], (0, 1.0, False)),
        ([], (None, None, False)),
    ],
)
def test_steady_state(steps: list[float], expected: tuple) -> None:
    assert metrics.steady_state(steps) == expected


def test_steady_state_tolerates_slow_growth() -> None:
    growing = [100.0] + [10.0 * (1 + 0.004 * i) for i in range(10)]
    k, ms, ok = metrics.steady_state(growing)
    assert k == 1 and ok and ms == pytest.approx(statistics.median(growing[1:]))


def test_max_abs_diff_nests() -> None:
    a = {"x": [torch.tensor([1.0, 2.0]), torch.tensor([3])], "y": torch.tensor(0.5)}
    b = {"x": [torch.tensor([1.0, 2.25]), torch.tensor([3])], "y": torch.tensor(0.5)}
    assert metrics.max_abs_diff(a, b) == 0.25
    assert metrics.max_abs_diff(a, a) == 0.0
    assert metrics.max_abs_diff(torch.zeros(2), torch.zeros(3)) == math.inf
    assert metrics.max_abs_diff(torch.tensor([1, 2]), torch.tensor([1, 3])) == 1.0


def _rec(model: str, mode: str, steady: float | None, wall: float = 2.0,
         ops: int | None = None) -> dict:
    r = schema.empty_record(model, mode)
    r.update(status="ok", steady_ms=steady, host_wall_ms_per_step=wall, ops_per_step=ops)
    return r


def test_derive_speedup_gap_and_us_per_op() -> None:
    eager, compiled = _rec("m", "eager", 8.0, ops=400), _rec("m", "compile", 2.0)
    adaptive, cpu = _rec("m", "adaptive_warm", 3.5), _rec("m", "cpu", None, wall=0.4)
    metrics.derive([eager, compiled, adaptive, cpu])
    assert adaptive["speedup_vs_eager"] == round(8.0 / 3.5, 4)
    assert adaptive["gap_closed"] == round((8.0 - 3.5) / (8.0 - 2.0), 4)
    assert compiled["gap_closed"] == 1.0 and eager["gap_closed"] == 0.0
    assert cpu["speedup_vs_eager"] is None
    assert cpu["host_us_per_op"] == round(0.4 * 1e3 / 400, 2)
    assert eager["host_us_per_op"] == round(2.0 * 1e3 / 400, 2)


def test_derive_without_eager_leaves_none() -> None:
    compiled = _rec("m", "compile", 2.0)
    metrics.derive([compiled])
    assert compiled["speedup_vs_eager"] is None and compiled["host_us_per_op"] is None


def test_schema_validate() -> None:
    r = schema.empty_record("m", "eager")
    problems = schema.validate(r)
    assert "a run that is not ok must say why (reason)" in problems
    assert any(p.startswith("status None") for p in problems)
    r.update(status="ok", steps=2, step_ms=[1.0])
    assert schema.validate(r) == ["step_ms must list one simulated time per step"]
    r.update(status="ok", steps=2, step_ms=[1.0, 1.0])
    assert schema.validate(r) == []
    r["extra"] = 1
    assert schema.validate(r) == ["unknown field 'extra'"]


def test_cumulative_marks_and_where_a_run_stays_below_another() -> None:
    steps = [900.0, 5.0, 5.0, 5.0]
    assert metrics.cumulative(steps) == [900.0, 905.0, 910.0, 915.0]
    assert metrics.cumulative_marks(steps) == {"1": 900.0, "4": 915.0}
    assert metrics.cumulative_marks([1.0] * 12) == {"1": 1.0, "10": 10.0, "12": 12.0}
    # eager: 100 per step; a run that starts dearer and catches up at step 3
    eager = [100.0] * 5
    assert metrics.below_from([250.0, 10.0, 10.0, 10.0, 10.0], eager) == 3
    assert metrics.below_from([50.0, 10.0], eager) == 1
    assert metrics.below_from([50.0, 200.0, 200.0], eager) is None  # ends above
    assert metrics.below_from([], eager) is None
