"""Host instructions per steady training step, counted by callgrind: eager vs replay.

    python tools/host_instructions.py                       # res_mlp, transformer_lm, cnn
    python tools/host_instructions.py --loops cnn --warmup 25 --steps 5 --out cg.json
    python tools/host_instructions.py --method subtract     # two runs, totals subtracted
    python tools/host_instructions.py --loops zoo:mlp,zoo:gpt --modes eager,recording,first_tier

Why: wall and process time on a shared 2-core machine swing between runs, so the README's
host cost of replay against eager (and issue 21's "not above today's" check of a
restructuring) is counted in instructions, which do not depend on load. For each loop of
``tests/loops.py`` and each mode (``eager``: eager on the device; ``adaptive``: adaptive
eager, which after its warm-up replays the step's compiled region), a child Python runs the
loop as ``benchmarks/test_speed.py`` does (``TORCHNEURON_COMPILE_LATENCY=0``,
``torch.set_num_threads(1)``, seed 0) under ``valgrind --tool=callgrind --cache-sim=no
--dump-instr=no``: ``--warmup`` steps, then the ``--steps`` measured steps.

Two ways to count only the measured steps (Python functions cannot be callgrind's
``--toggle-collect`` targets and client requests need a C extension):

- ``marker`` (default, one run): the child calls ``os.getppid()`` right before and right
  after the measured steps and callgrind runs with ``--dump-before=getppid``, so the
  counters are dumped at both calls; the second of the three parts is the measured steps
  (the tool checks there are exactly three parts: nothing else may call ``getppid``).
- ``subtract`` (two runs): the totals of warm-up + steps minus those of warm-up + 0 steps;
  as exact as the two warm-ups are alike (``PYTHONHASHSEED`` is fixed for that).

All threads count (PyTorch runs a device's backward on a worker thread); the compile worker
is a subprocess and is not traced. The child also reads adaptive eager's counters before
and after the measured steps (and how many executables came from the compile cache,
which is off unless ``TORCHNEURON_CACHE`` is set) and the table says whether those steps were steady (replays,
no op recorded, no compilation); figures of a non-steady run measure recording, not
replay. Two more modes measure what adaptive eager costs before it replays its compiled program
(issue 20): ``recording`` (no region ever becomes hot: ``ae_hot_threshold`` out of reach,
every step recorded) and ``first_tier`` (the default compile latency model, so the
compiled program is not in yet and replays run the recorded eager kernels; the table says
``first tier`` when every measured replay was). A loop ``zoo:NAME`` is the bench zoo's
model ``NAME`` (``torchneuron.bench.zoo``; its step's output is read back with ``.cpu()``,
as the bench does) instead of a loop of ``tests/loops.py``. The import path is the caller's: ``PYTHONPATH=/other/tree python
tools/host_instructions.py`` measures that tree's ``torchneuron`` (and its ``tests/loops.py``).
A run takes minutes per loop and mode; it is a measurement, not part of ``make test``.
``--keep DIR`` keeps the callgrind files for ``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

LOOPS = ("res_mlp", "transformer_lm", "cnn")
MODES = ("eager", "adaptive")
ALL_MODES = (*MODES, "recording", "first_tier")
# the counters read around the measured steps (adaptive eager's stats())
_COUNTERS = ("replays", "first_tier_replays", "ops_recorded", "compilations", "side_exits",
             "ops_between_regions")


def callgrind_total(text: str) -> int:
    """The instruction count of one callgrind out file's text (its ``totals:`` line, else
    its ``summary:`` line)."""
    for key in ("totals", "summary"):
        m = re.search(rf"^{key}:\s*(\d+)", text, re.MULTILINE)
        if m:
            return int(m.group(1))
    raise ValueError("callgrind out file has neither a 'totals:' nor a 'summary:' line; "
                     "expected a file written by valgrind --tool=callgrind")


def callgrind_parts(out_base: Path) -> list[int]:
    """The totals of the dumps of one callgrind run, in the order of their ``part:``
    number: ``out_base`` (the last part, at exit) and ``out_base.1``, ``out_base.2``, ..."""
    parts = []
    for path in [out_base, *out_base.parent.glob(out_base.name + ".*")]:
        text = path.read_text(errors="replace")
        m = re.search(r"^part:\s*(\d+)", text, re.MULTILINE)
        parts.append((int(m.group(1)) if m else 1, callgrind_total(text)))
    return [total for _, total in sorted(parts)]


def _child(name: str, mode: str, warmup: int, steps: int, result: str) -> None:
    """Runs inside valgrind: warm-up, marker, measured steps, marker; writes counters."""
    import torch

    import torchneuron
    from torchneuron.hardware import settings

    torch.set_num_threads(1)
    torch.manual_seed(0)
    ae = None
    if mode != "eager":
        import torchneuron.adaptive_eager as ae
    overrides: dict = {"recording": {"ae_hot_threshold": 10**9},
                       "first_tier": {"compile_latency": True}}.get(mode, {})
    with settings.override(**overrides):
        if name.startswith("zoo:"):
            from torchneuron.bench import zoo

            task = zoo.get(name[4:]).build("neuron")
            count = iter(range(10**9))

            def step() -> None:
                out = task.step(next(count))
                if isinstance(out, torch.Tensor):
                    out.cpu()
        else:
            sys.path.append(str(Path(torchneuron.__file__).resolve().parents[1]))  # its tests/
            from tests import loops

            step = loops.make_loop(name, "eager").step
        if ae is not None:
            ae.enable()
        for _ in range(warmup):
            step()
        before = ae.stats() if ae is not None else {}
        os.getppid()  # marker: callgrind dumps here (--dump-before=getppid)
        for _ in range(steps):
            step()
        os.getppid()  # marker
        after = ae.stats() if ae is not None else {}
        if ae is not None:
            ae.disable()
    delta = {k: after[k] - before[k] for k in _COUNTERS if k in after}
    if ae is not None:
        delta["cache_hits_in_warmup"] = before["cache_hits"]
    Path(result).write_text(json.dumps({"torchneuron": torchneuron.__file__, "delta": delta}))


def _valgrind(args: argparse.Namespace, name: str, mode: str, steps: int, work: Path,
              tag: str) -> tuple[list[int], dict]:
    out = work / f"callgrind.{name}.{mode}.{tag}.out"
    result = work / f"result.{name}.{mode}.{tag}.json"
    cmd = ["valgrind", "--tool=callgrind", "--cache-sim=no", "--dump-instr=no",
           f"--callgrind-out-file={out}"]
    if args.method == "marker":
        cmd.append("--dump-before=getppid")
    cmd += [sys.executable, str(Path(__file__).resolve()), "--child", name, mode,
            str(args.warmup), str(steps), str(result)]
    # the compile cache off unless the caller sets TORCHNEURON_CACHE: an executable another
    # commit of the same version wrote for the same graph would be replayed instead of this
    # tree's own compile
    env = {"TORCHNEURON_CACHE": "0", **os.environ, "TORCHNEURON_COMPILE_LATENCY": "0",
           "PYTHONHASHSEED": "0"}
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"valgrind run of {name} ({mode}) exited with {proc.returncode}; "
                           f"its last output:\n{proc.stderr[-3000:]}")
    return callgrind_parts(out), json.loads(result.read_text())


def measure(args: argparse.Namespace, name: str, mode: str, work: Path) -> dict:
    """Instructions of ``args.steps`` steady steps of loop ``name`` in ``mode``."""
    if args.method == "marker":
        parts, res = _valgrind(args, name, mode, args.steps, work, "marker")
        if len(parts) != 3:
            raise RuntimeError(f"expected 3 callgrind dumps (before, between and after the "
                               f"getppid markers), got {len(parts)}: something else calls "
                               "getppid; use --method subtract")
        instr = parts[1]
    else:
        full, res = _valgrind(args, name, mode, args.steps, work, "full")
        base, _ = _valgrind(args, name, mode, 0, work, "warmup")
        instr = sum(full) - sum(base)
    delta = res["delta"]
    if mode == "eager":
        steady = "eager"
    elif mode == "recording":
        steady = "recording" if delta.get("ops_recorded") and not delta.get("replays") \
            else "NOT RECORDING"
    elif mode == "first_tier":
        steady = "first tier" if delta.get("replays", 0) > 0 and delta.get(
            "first_tier_replays") == delta["replays"] else "NOT FIRST TIER"
    elif delta.get("replays", 0) > 0 and not delta.get("ops_recorded") \
            and not delta.get("compilations"):
        steady = "replaying"
    else:
        steady = "NOT STEADY"
    return {"loop": name, "mode": mode, "instructions": instr, "steps": args.steps,
            "warmup": args.warmup, "method": args.method, "steady": steady, "ae": delta,
            "torchneuron": res["torchneuron"]}


def table(rows: list[dict]) -> str:
    """The table: per loop and mode the instructions of the measured steps, and per loop
    each other mode / eager."""
    lines = [f"{'loop':<16}{'mode':<12}{'instructions':>16}  {'state':<15}adaptive eager"]
    by = {(r["loop"], r["mode"]): r for r in rows}
    for r in rows:
        ae = " ".join(f"{k}={v}" for k, v in r["ae"].items())
        lines.append(f"{r['loop']:<16}{r['mode']:<12}{r['instructions'] / 1e6:>15.2f}M"
                     f"  {r['steady']:<15}{ae}")
    for name in dict.fromkeys(r["loop"] for r in rows):
        e = by.get((name, "eager"))
        for mode, what in (("adaptive", "replay"), ("recording", "recording"),
                           ("first_tier", "first tier")):
            a = by.get((name, mode))
            if e and a:
                lines.append(f"{name:<16}{what} / eager {a['instructions'] / 1e6:.2f}M / "
                             f"{e['instructions'] / 1e6:.2f}M = "
                             f"{a['instructions'] / e['instructions']:.3f}x")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        name, mode, warmup, steps, result = argv[1:6]
        _child(name, mode, int(warmup), int(steps), result)
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loops", default=",".join(LOOPS), help="comma-separated loop names")
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated, of " + ", ".join(ALL_MODES))
    p.add_argument("--warmup", type=int, default=25)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--method", choices=("marker", "subtract"), default="marker")
    p.add_argument("--out", help="write the rows as JSON to this file")
    p.add_argument("--keep", help="keep the callgrind out files in this folder")
    args = p.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind not found; install it (apt-get install valgrind)", file=sys.stderr)
        return 2
    work = Path(args.keep or tempfile.mkdtemp(prefix="host_instructions."))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for name in args.loops.split(","):
            for mode in args.modes.split(","):
                if mode not in ALL_MODES:
                    raise SystemExit(f"unknown mode {mode!r}; expected one of {ALL_MODES}")
                rows.append(measure(args, name, mode, work))
                print(table(rows[-1:]).splitlines()[1], file=sys.stderr, flush=True)
                if args.out:
                    Path(args.out).write_text(json.dumps(rows, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"callgrind instructions of {args.steps} steps after {args.warmup} warm-up steps "
          f"({args.method}); torchneuron from {rows[0]['torchneuron'] if rows else '?'}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
