"""The charts mark where adaptive eager's last tier came in (``--steps auto``), so the
cumulative chart shows that a run reached its compiled programs and what followed."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchneuron.bench import chart


def _rec(model: str, mode: str, step_ms: list[float], last_tier_step: int | None = None) -> dict:
    return {"model": model, "mode": mode, "step_ms": step_ms, "last_tier_step": last_tier_step}


def test_charts_mark_the_step_the_last_tier_came_in(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    records = [_rec("mlp", "eager", [900.0, 4.0, 4.0, 4.0, 4.0]),
               _rec("mlp", "adaptive_cold", [900.0, 4.1, 0.5, 0.5, 0.2], last_tier_step=4),
               _rec("cnn", "adaptive_cold", [800.0, 2.0, 0.3], last_tier_step=None)]
    assert chart.tier_marks(records, "mlp") == [
        (4, "tab:blue", "adaptive_cold: last tier in after step 4")]
    assert chart.tier_marks(records, "cnn") == []  # the cap was hit: nothing to mark

    drawn: list[tuple[float, str]] = []
    original = Axes.axvline

    def spy(self: Axes, x: float = 0, *args: object, **kwargs: object) -> object:
        drawn.append((x, str(kwargs.get("label"))))
        return original(self, x, *args, **kwargs)

    monkeypatch.setattr(Axes, "axvline", spy)
    for write in (chart.write_chart, chart.write_cumulative_chart):
        drawn.clear()
        out = write(records, tmp_path / f"{write.__name__}.png")
        assert out is not None and out.read_bytes()[:4] == b"\x89PNG"
        assert drawn == [(4, "adaptive_cold: last tier in after step 4")]
