"""``torchneuron-bench`` (also ``python -m torchneuron.bench``): run the zoo, write reports.

Examples::

    torchneuron-bench --quick --out results/          # CI-sized: every model, every mode
    torchneuron-bench --models gpt,cnn --hardware trn3 --steps 50 --out results/
    torchneuron-bench --models mlp --modes eager,compile --trace --out /tmp/mlp
    torchneuron-bench --models gpt --steps auto --max-steps 3000 --timeout 7200
    torchneuron-bench --models gpt --nproc 4 --parallel ddp,fsdp --out results/

Writes ``OUT/report.md``, ``OUT/report.json`` (a list of records, one per model and
mode; fields in ``torchneuron.bench.schema.FIELDS``), ``OUT/chart.png`` and, with
``--trace``, ``OUT/traces/MODEL-MODE.json`` (Chrome trace-event files of one steady step).
With ``--nproc N`` the run is data-parallel training instead (``dist_suite``): each model
with each of ``--parallel`` on 1, 2, 4 ... N ranks started by torchrun, in eager,
torch.compile and adaptive eager (``--modes`` among those); report.md / report.json then
hold one row per (model, parallelism, mode, ranks) (fields in ``dist_suite.DIST_FIELDS``).
Exit status: 0 when the report was written (a run that raised, crashed or timed out is
reported with its reason), 1 with ``--strict`` if any run is not ok, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "resolve_steps"]


def _csv(value: str, valid: list[str], what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in valid]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(bad)}; valid: {', '.join(valid)}")
    return items


def _steps(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps takes a number or 'auto', not {value!r}"
                                         ) from None


def _default_max_steps() -> int:
    from torchneuron.bench.suite import DEFAULT_MAX_STEPS

    return DEFAULT_MAX_STEPS


def _parser() -> argparse.ArgumentParser:
    from torchneuron.bench import modes, zoo
    from torchneuron.hardware import PROFILES

    p = argparse.ArgumentParser(
        prog="torchneuron-bench",
        description="Eager vs adaptive eager vs torch.compile on the simulated NeuronCore.",
        epilog="example: torchneuron-bench --models gpt,cnn --hardware trn3 --steps 50 "
               "--out results/")
    p.add_argument("--models", type=lambda v: _csv(v, list(zoo.ZOO), "model"),
                   default=list(zoo.ZOO), help=f"comma-separated (default all: "
                   f"{','.join(zoo.ZOO)})")
    p.add_argument("--modes", type=lambda v: _csv(v, list(modes.MODES), "mode"),
                   default=list(modes.MODES), help=f"comma-separated (default all: "
                   f"{','.join(modes.MODES)})")
    p.add_argument("--steps", type=_steps, default=None,
                   help="steps per run (default 20; 6 with --quick), or 'auto': each model "
                   "until adaptive eager's last tier is in (its compiled programs replayed), "
                   "at most --max-steps; every mode of the model runs that many steps")
    p.add_argument("--max-steps", type=int, default=None,
                   help=f"cap of --steps auto (default {_default_max_steps()})")
    p.add_argument("--hardware", choices=sorted(PROFILES), default=None,
                   help="simulated hardware (default: TORCHNEURON_HARDWARE or trn2)")
    p.add_argument("--quick", action="store_true", help="CI-sized: few steps per run")
    p.add_argument("--out", type=Path, default=Path("results"), help="output directory")
    p.add_argument("--trace", action="store_true",
                   help="write a Chrome trace of one steady step of each model and mode")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="runs in parallel (simulated figures do not depend on it)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    p.add_argument("--zero-compile-latency", action="store_true",
                   help="model no compile latency (TORCHNEURON_COMPILE_LATENCY=0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if any run is not ok (errors, crashes, timeouts, not run)")
    p.add_argument("--list", action="store_true", help="list the models and modes and exit")
    p.add_argument("--judge", type=Path, nargs="+", default=None, metavar="REPORT_JSON",
                   help="judge the adaptive runs of existing report.json files by issue 20's "
                   "whole-run criteria (bench.criteria), print them and exit (1 if one is "
                   "not met)")
    p.add_argument("--nproc", type=int, default=None,
                   help="data-parallel training on 1, 2, 4 ... NPROC ranks started by torchrun "
                   "(default models: gpt; modes: eager, compile, adaptive_cold)")
    p.add_argument("--parallel", type=lambda v: _csv(v, ["ddp", "fsdp"], "parallelism"),
                   default=None, help="with --nproc: ddp, fsdp or both (default ddp,fsdp)")
    return p


def _meta(args: argparse.Namespace, hardware: str, steps: int | str, wall_s: float,
          argv: list[str]) -> dict[str, Any]:
    import torch

    from torchneuron.hardware import get_profile, settings

    with settings.override(hardware=hardware):
        described = settings.describe()
    return {
        "command": shlex.join(["torchneuron-bench", *argv]),
        "hardware": hardware, "steps": steps, "wall_s": wall_s,
        "settings": described + (
            "\n(--zero-compile-latency: TORCHNEURON_COMPILE_LATENCY=0 in every run)"
            if args.zero_compile_latency else ""),
        "assumptions": get_profile(hardware).describe_assumptions(),
        "versions": {"torch": torch.__version__, "torchneuron": _version()},
        "chart": None,
    }


def resolve_steps(steps: int | str | None, quick: bool) -> int | str:
    """``--steps`` when given (a number or ``"auto"``), else the quick (CI-sized) or the
    full default."""
    from torchneuron.bench.suite import DEFAULT_STEPS, QUICK_STEPS

    return steps if steps is not None else (QUICK_STEPS if quick else DEFAULT_STEPS)


def _version() -> str:
    """The running code's version (an editable install's metadata keeps the version it
    was installed at)."""
    from torchneuron import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    from torchneuron.bench import chart, report, zoo
    from torchneuron.bench.suite import AUTO, pacer_mode, run_suite
    from torchneuron.hardware import current_profile

    if args.list:
        for w in zoo.ZOO.values():
            print(f"{w.name:<10} {w.kind:<10} {w.description}")
        print("modes:", ", ".join(_parser().get_default("modes")))
        return 0
    if args.judge:
        return _judge(args.judge)
    if args.nproc is not None or args.parallel is not None:
        return _main_distributed(args, argv)
    steps = resolve_steps(args.steps, args.quick)
    max_steps = args.max_steps if args.max_steps is not None else _default_max_steps()
    if (isinstance(steps, int) and steps < 1) or max_steps < 1:
        print("torchneuron-bench: --steps and --max-steps must be >= 1", file=sys.stderr)
        return 2
    if steps == AUTO and pacer_mode(args.modes) is None:
        print("torchneuron-bench: --steps auto needs adaptive_cold or adaptive_warm among "
              "--modes (that run decides how many steps every mode runs)", file=sys.stderr)
        return 2
    if args.out.exists() and not args.out.is_dir():
        print(f"torchneuron-bench: --out {args.out} is a file; give a directory (created if "
              "missing) for report.md, report.json and chart.png", file=sys.stderr)
        return 2
    hardware = args.hardware or current_profile().name
    total = len(args.models) * len(args.modes)
    bar = None
    if not args.no_progress:
        import tqdm

        tqdm.tqdm.monitor_interval = 0  # no monitor thread: runs are forked
        bar = tqdm.tqdm(total=total, unit="run", desc="torchneuron-bench", file=sys.stderr)

    def done(rec: dict[str, Any]) -> None:
        if bar is not None:
            bar.set_postfix_str(f"{rec['model']}/{rec['mode']}: {rec['status']}")
            bar.update(1)

    records, wall_s = run_suite(args.models, args.modes, steps, hardware, args.out,
                                trace=args.trace, jobs=args.jobs, timeout=args.timeout,
                                zero_compile_latency=args.zero_compile_latency,
                                max_steps=max_steps, on_done=done)
    if bar is not None:
        bar.close()
    meta = _meta(args, hardware, f"auto (at most {max_steps})" if steps == AUTO else steps,
                 wall_s, argv)
    png = chart.write_chart(records, args.out / "chart.png",
                            f"simulated ms per step on {hardware} (log scale)")
    meta["chart"] = png.name if png is not None else None
    cum = chart.write_cumulative_chart(records, args.out / "cumulative.png",
                                       f"cumulative simulated ms on {hardware} (log scale)")
    meta["cumulative_chart"] = cum.name if cum is not None else None
    report.write_json(records, args.out / "report.json")
    report.write_markdown(records, meta, args.out / "report.md")
    failed = [r for r in records if r["status"] != "ok"]
    print(f"wrote {args.out / 'report.md'}, {args.out / 'report.json'}"
          + (f", {args.out / 'chart.png'}" if png else "")
          + (f", {args.out / 'cumulative.png'}" if cum else "") + f" in {wall_s:.0f} s")
    for r in records:
        if r.get("steps_cap") is not None:
            print(f"  {r['model']}: " + report.auto_steps_line(r))
        if r.get("whole_run_checks") and r.get("steps_cap") is not None:  # (--steps auto)
            print(f"  {r['model']}: " + report.criteria_line(r))
    for r in failed:
        print(f"  {r['model']}/{r['mode']}: {r['status']}: {r['reason']}", file=sys.stderr)
    return 1 if failed and args.strict else 0


def _judge(paths: list[Path]) -> int:
    """``--judge``: the whole-run criteria of the adaptive runs in existing reports (also
    those written before reports stated them), from their per-step simulated times."""
    import json

    from torchneuron.bench import criteria, report

    records = [r for p in paths for r in json.loads(p.read_text())]
    criteria.fill(records)
    judged = [r for r in records if r.get("whole_run_checks")]
    for r in judged:
        print(f"{r['model']}: {report.criteria_line(r)}")
    if not judged:
        print("torchneuron-bench: --judge found no adaptive run with step times",
              file=sys.stderr)
    return 0 if judged and all(r["whole_run_checks"]["met"] for r in judged) else 1


def _main_distributed(args: argparse.Namespace, argv: list[str]) -> int:
    """``--nproc N``: data-parallel training of the models on 1 .. N ranks (``dist_suite``)."""
    from torchneuron.bench import dist_report, zoo
    from torchneuron.bench.dist_suite import DIST_MODES, nproc_counts, run_distributed
    from torchneuron.hardware import current_profile

    if args.nproc is None or args.nproc < 1:
        print("torchneuron-bench: --parallel needs --nproc N (N >= 1)", file=sys.stderr)
        return 2
    explicit = {a.split("=")[0] for a in argv}
    models = args.models if "--models" in explicit else ["gpt"]
    mode_names = args.modes if "--modes" in explicit else list(DIST_MODES)
    not_training = [m for m in models if zoo.get(m).kind != "training"]
    bad_modes = [m for m in mode_names if m not in DIST_MODES]
    if not_training or bad_modes:
        print("torchneuron-bench: --nproc trains data-parallel: "
              + (f"{', '.join(not_training)} is not a training workload; " if not_training
                 else "")
              + (f"modes {', '.join(bad_modes)} are not among {', '.join(DIST_MODES)}"
                 if bad_modes else ""), file=sys.stderr)
        return 2
    steps = resolve_steps(args.steps, args.quick)
    if not isinstance(steps, int) or steps < 1:
        print("torchneuron-bench: --nproc takes --steps as a number >= 1", file=sys.stderr)
        return 2
    hardware = args.hardware or current_profile().name
    parallels = args.parallel or ["ddp", "fsdp"]

    def done(rec: dict[str, Any]) -> None:
        if not args.no_progress:
            print(f"torchneuron-bench: {rec['model']}/{rec['parallel']}/{rec['mode']} on "
                  f"{rec['nproc']} ranks: {rec['status']} ({rec['wall_s']:.0f} s)",
                  file=sys.stderr)

    args.out.mkdir(parents=True, exist_ok=True)
    records, wall_s = run_distributed(models, parallels, mode_names, nproc_counts(args.nproc),
                                      steps, hardware, timeout=args.timeout,
                                      zero_compile_latency=args.zero_compile_latency,
                                      on_done=done)
    meta = _meta(args, hardware, steps, wall_s, argv)
    dist_report.write_json(records, args.out / "report.json")
    dist_report.write_markdown(records, meta, args.out / "report.md")
    print(f"wrote {args.out / 'report.md'}, {args.out / 'report.json'} in {wall_s:.0f} s")
    failed = [r for r in records if r["status"] != "ok"]
    for r in failed:
        print(f"  {r['model']}/{r['parallel']}/{r['mode']}/{r['nproc']}: {r['status']}: "
              f"{r['reason']}", file=sys.stderr)
    return 1 if failed and args.strict else 0
