"""``report.md`` and ``report.json`` of a distributed bench run (``--nproc``).

The table is one row per (model, parallelism, mode, ranks): rank 0's and the slowest
rank's simulated ms per step, the scaling efficiency against one rank, the collective time
per step and how much of it the compute queue did not wait for (overlap).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchneuron.bench.dist_suite import DIST_FIELDS
from torchneuron.bench.report import _finite, _md_table, _num

__all__ = ["HEADER", "render_markdown", "table_rows", "write_json", "write_markdown"]

Record = dict[str, Any]

HEADER = ["model", "parallel", "mode", "ranks", "steady ms/step (slowest rank)",
          "ms/step per rank", "scaling efficiency", "collective ms/step",
          "exposed ms/step", "overlap", "compute ms/step", "replays", "max diff vs eager"]


def write_json(records: list[Record], path: Path) -> Path:
    """The records, keys in ``DIST_FIELDS`` order."""
    ordered = [{k: _finite(r.get(k)) for k in DIST_FIELDS} for r in records]
    path.write_text(json.dumps(ordered, indent=1, default=str, allow_nan=False) + "\n")
    return path


def table_rows(records: list[Record]) -> list[list[str]]:
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        per_rank = r["steady_ms_per_rank"] or []
        diff = r["max_abs_diff_vs_eager"]
        steady = (_num(r["steady_ms"]) if r["steady_ms"] is not None else
                  f"not steady (last step {_num((r['step_ms'] or [None])[-1])})")
        rows.append([
            r["model"], r["parallel"], r["mode"], str(r["nproc"]),
            steady,
            " / ".join(_num(x) for x in per_rank),
            _num(r["scaling_efficiency"], "{:.0%}"),
            _num(r["collective_ms_per_step"]),
            _num(r["exposed_ms_per_step"]),
            _num(r["overlap_pct"], "{:.0f}%"),
            _num(r["compute_ms_per_step"]),
            _num(r["replays"], "{}"),
            "–" if diff is None else ("0" if diff == 0 else f"{diff:.1e}"),
        ])
    return rows


def render_markdown(records: list[Record], meta: dict[str, Any]) -> str:
    lines = [
        "# torchneuron-bench report: data-parallel training", "",
        f"Command: `{meta['command']}`  ",
        f"Simulated hardware: **{meta['hardware']}**; {meta['steps']} steps per run; ranks "
        f"started by torchrun (`torch.distributed.run`), one process and one simulated "
        f"NeuronCore each; wall time of the whole run {meta['wall_s']:.0f} s.", "",
        "Weak scaling: every rank trains on a batch of the workload's size; scaling "
        "efficiency = one rank's steady ms per step / N ranks' (same parallelism and mode). "
        "Collective ms/step: time rank 0's collective queue ran; exposed: the part its "
        "compute queue waited for; overlap = the share hidden behind compute. Every figure "
        "but the wall time is simulated and identical on every run.", "",
    ]
    lines += _md_table(HEADER, table_rows(records))
    bad = [r for r in records if r["status"] != "ok"]
    if bad:
        lines += ["", "## Not run or failed", ""]
        lines += _md_table(["model", "parallel", "mode", "ranks", "status", "reason"],
                           [[r["model"], r["parallel"], r["mode"], str(r["nproc"]),
                             r["status"], str(r["reason"]).splitlines()[0][:300]]
                            for r in bad])
    lines += ["", "## Settings in force", "", "```", meta["settings"], "```", "",
              "## Fields of report.json", ""]
    lines += _md_table(["field", "meaning"], [[k, v] for k, v in DIST_FIELDS.items()])
    return "\n".join(lines) + "\n"


def write_markdown(records: list[Record], meta: dict[str, Any], path: Path) -> Path:
    path.write_text(render_markdown(records, meta))
    return path
