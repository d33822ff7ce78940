"""``report.json`` (the records) and ``report.md`` (tables for people) from a bench run.

The Markdown states what the figures rest on: the command, the simulated hardware, every
setting in force (``hardware.settings.describe()``) and which hardware figures are
assumptions (``current_profile().describe_assumptions()``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from torchneuron.bench.schema import FIELDS

__all__ = ["auto_steps_line", "criteria_line", "criteria_rows", "render_markdown", "table_rows",
           "write_json", "write_markdown"]

Record = dict[str, Any]


def _finite(x: Any) -> Any:
    """Strict JSON has no Infinity/NaN: such a float becomes the string "inf"/"nan" (a
    difference of ``inf`` means the outputs' shapes or structure differ from eager's)."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def write_json(records: list[Record], path: Path) -> Path:
    """The records, one object per (model, mode), keys in ``schema.FIELDS`` order."""
    ordered = [{k: _finite(r.get(k)) for k in FIELDS} for r in records]
    path.write_text(json.dumps(ordered, indent=1, default=str, allow_nan=False) + "\n")
    return path


def _num(x: Any, fmt: str = "{:.3f}") -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and x == float("inf"):
        return "inf"
    return fmt.format(x)


def _diff(x: Any) -> str:
    if x is None:
        return "–"
    return "0" if x == 0 else f"{x:.1e}"


def _steady(r: Record) -> str:
    if r["steady_ms"] is None:
        return "not reached"
    mark = "" if r["steady_reached"] else " (1 step)"
    return f"{r['steady_ms']:.3f} (from {r['steady_step']}){mark}"


def _compile(r: Record) -> str:
    if r["compile_ms_critical_path"] is None:
        return "–"
    bg = r["compile_ms_background"]
    total = f"{r['compile_ms_total']:.0f}" if bg is not None else "?"
    return f"{r['compile_ms_critical_path']:.0f} / {total}"


def auto_steps_line(r: Record) -> str:
    """``--steps auto``, the run that set its model's steps: when the last tier was in, or
    that the cap was hit and what adaptive eager's regions were doing then."""
    if r["status"] != "ok":
        return f"{r['mode']} {r['status']} after {r['steps']} steps: {r['reason']}"
    if not r.get("steps_cap_hit"):
        return (f"{r['mode']}: last tier in after step {r['last_tier_step']}; "
                f"{r['steps']} steps run")
    st = r.get("adaptive_stats") or {}
    second = int(st.get("replays") or 0) - int(st.get("first_tier_replays") or 0)
    by_state = ", ".join(f"{k} {v}" for k, v in (st.get("regions_by_state") or {}).items())
    return (f"{r['mode']}: CAP HIT, stopped at --max-steps {r['steps_cap']} before the last "
            f"tier was in (compiled-program replays {second}, first-tier replays "
            f"{st.get('first_tier_replays', '?')}; regions: {by_state or 'none'})")


def _yes(x: bool | None) -> str:
    return "–" if x is None else ("yes" if x else "NO")


def _above(x: list[Any] | None) -> str:
    return "never" if x is None else f"+{x[1]:.3f} ms after step {x[0]}"


def criteria_rows(records: list[Record]) -> list[list[str]]:
    """One row per adaptive run with ``whole_run_checks`` (``bench.criteria``)."""
    rows = []
    for r in records:
        c = r.get("whole_run_checks")
        if not c:
            continue
        rows.append([
            r["model"], r["mode"], str(c["steps"]),
            _yes(c["at_or_below_eager"]), _above(c["most_above_eager"]),
            _yes(c["at_or_below_compile_every_step"]), _above(c["most_above_compile"]),
            _yes(c["last_tier_in"]) + (f" (after step {r['last_tier_step']})"
                                       if c["last_tier_in"] else ""),
            _yes(c["met"]) + (f" ({c['why_not_judged']})" if c["why_not_judged"] else ""),
        ])
    return rows


def criteria_line(r: Record) -> str:
    """The criteria of one adaptive run in a line, for the command's output."""
    c = r["whole_run_checks"]
    verdict = "MET" if c["met"] else "not all judged" if c["why_not_judged"] else "NOT met"
    return (f"{r['mode']}: criteria {verdict} over {c['steps']} steps "
            f"(<= eager from step {c['at_or_below_eager_from_step']}: "
            f"{_yes(c['at_or_below_eager'])}, most above {_above(c['most_above_eager'])}; "
            f"<= torch.compile every step: {_yes(c['at_or_below_compile_every_step'])}, most "
            f"above {_above(c['most_above_compile'])}; last tier in: {_yes(c['last_tier_in'])})"
            + (f"; {c['why_not_judged']}" if c["why_not_judged"] else ""))


def table_rows(records: list[Record]) -> list[list[str]]:
    """The main table: one row per run that produced figures."""
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        cpu = r["mode"] == "cpu"
        rows.append([
            r["model"], r["mode"],
            "(host only)" if cpu else _num(r["first_step_ms"]),
            "(host only)" if cpu else _steady(r),
            _num(r["speedup_vs_eager"], "{:.2f}x"),
            _num(r["gap_closed"], "{:.0%}"),
            _compile(r),
            "–" if cpu else f"{r['graphs_compiled']} / {_num(r['regions'], '{}')}",
            "–" if cpu else f"{r['executables']} ({r['executable_launches']})",
            _num(r["cache_hits"], "{}"),
            _num(r["side_exits"], "{}"),
            "–" if cpu else str(sum((r["fallbacks"] or {}).values())),
            _diff(r["max_abs_diff_vs_eager"]),
            _num(r["host_wall_ms_per_step"], "{:.1f}"),
            _num(r["host_us_per_op"], "{:.0f}"),
            _num(r["roofline_pct"], "{:.0f}%"),
        ])
    return rows


HEADER = ["model", "mode", "first step ms", "steady ms/step (from step)", "speedup vs eager",
          "gap closed", "compile ms critical / total", "graphs / regions",
          "executables (launches)", "cache hits", "side exits", "fallbacks", "max diff vs eager",
          "wall ms/step", "wall µs/op", "time % of roofline"]


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def render_markdown(records: list[Record], meta: dict[str, Any]) -> str:
    """The report as Markdown. ``meta``: command, hardware, steps, settings, assumptions,
    chart (file name or None), wall_s, versions."""
    lines = [
        "# torchneuron-bench report", "",
        f"Command: `{meta['command']}`  ",
        f"Simulated hardware: **{meta['hardware']}**; {meta['steps']} steps per run; "
        f"torch {meta['versions'].get('torch', '?')}, torchneuron "
        f"{meta['versions'].get('torchneuron', '?')}; wall time of the whole run "
        f"{meta['wall_s']:.0f} s.", "",
        "Simulated figures come from the runtime's own clock and counters and are identical "
        "on every run; wall-clock figures (wall ms/step, wall µs/op) are this machine's, "
        "measured under whatever load it had. `compile ms` is modeled compile latency on "
        "the simulated clock: critical path = what the host waited for; total adds the "
        "background compiler queue (`?` when the runtime reports none). `max diff vs "
        "eager`: largest absolute difference from the eager run over every step's output "
        "and the final parameters and buffers.", "",
        "## Per model and mode", "",
    ]
    lines += _md_table(HEADER, table_rows(records))
    if meta.get("chart"):
        lines += ["", f"![simulated time per step]({meta['chart']})"]
    whole = [r for r in records if r.get("cumulative_ms")]
    if whole:
        marks = list(dict.fromkeys(n for r in whole for n in r["cumulative_ms"]))
        lines += ["", "## The whole run: cumulative simulated time", "",
                  "Simulated ms of the run after N steps (the last column is the run's last "
                  "step), and the first step from which the run's cumulative time stays at "
                  "or below eager's and torch.compile's to the end of the run.", ""]
        lines += _md_table(
            ["model", "mode", *(f"after {n}" for n in marks), "<= eager from step",
             "<= compile from step"],
            [[r["model"], r["mode"], *(_num(r["cumulative_ms"].get(n)) for n in marks),
              _num(r["below_eager_from"], "{}"), _num(r["below_compile_from"], "{}")]
             for r in whole])
        if meta.get("cumulative_chart"):
            lines += ["", f"![cumulative simulated time]({meta['cumulative_chart']})"]
    judged = criteria_rows(records)
    if judged:
        lines += ["", "## Adaptive eager over the whole run: issue 20's criteria", "",
                  "Computed from every step's measured simulated time (`bench.criteria`): "
                  "adaptive eager's cumulative time at most eager's after every step from "
                  "step 5 on, at most torch.compile's after every step, and its last tier "
                  "(the compiled programs) in within the run (`--steps auto`). \"most above\": "
                  "the largest excess of its cumulative time over the other's, and after "
                  "which step (from step 5 for eager).", ""]
        lines += _md_table(["model", "mode", "steps", "<= eager from step 5",
                            "most above eager", "<= compile every step", "most above compile",
                            "last tier in", "all met"], judged)
    paced = [r for r in records if r.get("steps_cap") is not None]
    if paced:
        lines += ["", "## --steps auto: steps to adaptive eager's last tier", "",
                  "Each model's adaptive run went on until its regions' compiled programs had "
                  "replayed and no region was hot or compiling, then a few steps more; every "
                  "other mode of the model ran as many steps. Measured, never extrapolated.",
                  ""]
        lines += [f"- {r['model']}: {auto_steps_line(r)}" for r in paced]
    bad = [r for r in records if r["status"] != "ok"]
    if bad:
        lines += ["", "## Not run or failed", ""]
        lines += _md_table(["model", "mode", "status", "reason (from the runtime)"],
                           [[r["model"], r["mode"], r["status"], str(r["reason"])] for r in bad])
    fb = [(r, k, n) for r in records for k, n in sorted((r["fallbacks"] or {}).items())]
    if fb:
        lines += ["", "## Fallbacks and their reasons", ""]
        lines += _md_table(["model", "mode", "reason", "count"],
                           [[r["model"], r["mode"], k, str(n)] for r, k, n in fb])
    traces = [r for r in records if r["trace"]]
    if traces:
        lines += ["", "## Traces (one steady step; open in https://ui.perfetto.dev)", ""]
        lines += [f"- {r['model']} / {r['mode']}: [{r['trace']}]({r['trace']})" for r in traces]
    lines += ["", "## Settings in force", "", "```", meta["settings"], "```", "",
              "## Assumed hardware figures (no public source)", "", "```",
              meta["assumptions"], "```", "", "## Fields of report.json", ""]
    lines += _md_table(["field", "meaning"], [[k, v] for k, v in FIELDS.items()])
    return "\n".join(lines) + "\n"


def write_markdown(records: list[Record], meta: dict[str, Any], path: Path) -> Path:
    path.write_text(render_markdown(records, meta))
    return path
