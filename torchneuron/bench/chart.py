"""The chart: simulated ms per step, one panel per model, one line per mode (matplotlib, Agg).

A log scale, because the first steps carry seconds of modeled compile latency while a
steady step takes milliseconds; both must stay readable on one panel.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["write_chart"]

_STYLE = {
    "eager": ("tab:gray", "o"),
    "adaptive_cold": ("tab:blue", "s"),
    "adaptive_warm": ("tab:green", "^"),
    "compile": ("tab:red", "D"),
}


def write_chart(records: list[dict[str, Any]], path: Path, title: str = "") -> Path | None:
    """Write the chart to ``path`` (PNG or SVG by suffix); None if no run has step times."""
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
            ax.plot(range(len(r["step_ms"])), r["step_ms"], label=r["mode"], color=color,
                    marker=marker, markersize=3, linewidth=1.2)
        ax.set_yscale("log")
        ax.set_title(model)
        ax.set_xlabel("step")
        ax.set_ylabel("simulated ms per step")
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
