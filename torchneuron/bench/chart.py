"""The chart: simulated ms per step, one panel per model, one line per mode (matplotlib, Agg).

A log scale, because the first steps carry seconds of modeled compile latency while a
steady step takes milliseconds; both must stay readable on one panel. The cumulative
chart of a long run (``--steps auto``: thousands of steps) puts steps on a log scale too,
so that the first steps, where adaptive eager's line crosses the others, stay visible
beside the step where its last tier came in.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from torchneuron.bench.metrics import cumulative as cumulative_ms

__all__ = ["tier_marks", "write_chart", "write_cumulative_chart"]

_STYLE = {
    "eager": ("tab:gray", "o"),
    "adaptive_cold": ("tab:blue", "s"),
    "adaptive_warm": ("tab:green", "^"),
    "compile": ("tab:red", "D"),
}


LOG_STEPS_FROM = 200  # a cumulative panel of a longer run gets a log step axis, too


def _steps_of(records: list[dict[str, Any]], model: str) -> int:
    return max((len(r["step_ms"]) for r in records if r["model"] == model and r["step_ms"]),
               default=0)


def _markevery(n: int) -> int | float:
    """Every point marked on a short run; about 40 marks on a long one (thousands of
    markers would hide the lines)."""
    return 1 if n <= 100 else 0.025


def tier_marks(records: list[dict[str, Any]], model: str) -> list[tuple[int, str, str]]:
    """(step, color, label) per adaptive run of ``model`` whose last tier came in (its
    ``last_tier_step``, set by ``--steps auto``): the chart marks where the compiled
    programs took over from the first tier, so a reader sees that the run reached them
    and what the line does after."""
    marks = []
    for r in records:
        n = r.get("last_tier_step")
        if r["model"] == model and r["step_ms"] and isinstance(n, int):
            color = _STYLE.get(r["mode"], ("black", "x"))[0]
            marks.append((n, color, f"{r['mode']}: last tier in after step {n}"))
    return marks


def write_chart(records: list[dict[str, Any]], path: Path, title: str = "",
                cumulative: bool = False) -> Path | None:
    """Write the chart to ``path`` (PNG or SVG by suffix); None if no run has step times.
    ``cumulative``: simulated ms of the run so far against steps (where each mode's
    line crosses eager's and torch.compile's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m in dict.fromkeys(r["model"] for r in records)
              if any(r["model"] == m and r["step_ms"] for r in records)]
    if not models:
        return None
    cols = min(3, len(models))
    rows = math.ceil(len(models) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
    for ax, model in zip(axes.flat, models, strict=False):
        for r in records:
            if r["model"] != model or not r["step_ms"]:
                continue
            color, marker = _STYLE.get(r["mode"], ("black", "x"))
            ys = cumulative_ms(r["step_ms"]) if cumulative else r["step_ms"]
            ax.plot(range(1, len(ys) + 1) if cumulative else range(len(ys)), ys,
                    label=r["mode"], color=color, marker=marker, markersize=3, linewidth=1.2,
                    markevery=_markevery(len(ys)))
        for step, color, label in tier_marks(records, model):
            ax.axvline(step, color=color, linestyle=":", linewidth=1.0, label=label)
        ax.set_yscale("log")
        if cumulative and _steps_of(records, model) > LOG_STEPS_FROM:
            ax.set_xscale("log")  # the first steps (where the lines cross) stay readable
        ax.set_title(model)
        ax.set_xlabel("steps" if cumulative else "step")
        ax.set_ylabel("cumulative simulated ms" if cumulative else "simulated ms per step")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(models):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None} if path.suffix == ".png" else None)
    plt.close(fig)
    return path


def write_cumulative_chart(records: list[dict[str, Any]], path: Path,
                           title: str = "") -> Path | None:
    """The second chart: cumulative simulated ms against steps, per model."""
    return write_chart(records, path, title, cumulative=True)

