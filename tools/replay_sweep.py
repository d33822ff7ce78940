"""OpInfo and ModuleInfo under replay: every sample inside a region adaptive eager replays.

Why: ``tools/opinfo_device.py`` and ``tools/moduleinfo_sweep.py`` prove the device equal
to CPU eagerly, and ``tools/lowering_coverage.py`` proves the compiler equal to eager one
graph at a time; but adaptive eager captures a user's op stream itself, compiles the
regions that repeat and replays their programs on every later step. Its capture
(dataflow, aliases, in-place writes, scalars baked into guards) is a second front end to
the compiler, and a wrong number there is as wrong as anywhere. This sweep runs PyTorch's
op and module suites inside such regions and compares each step's results with eager
on the device, bit for bit (``tools/replay_steps.py``: how a sample runs under replay and
how its results are judged; ``tools/replay_modules.py``: the modules). Per sample:

  PASS          a compiled program replayed (``stats()``: a replay not in the first tier)
                and every step has eager's bits
  MISMATCH      some step differs from eager (a defect)
  REFUSED       the compiler refused the region or an op in it (typed, counted, run
                eagerly); every step has eager's bits
  NOT-REPLAYED  no program replay, not for a refusal (the reason: ``explain()``)
  ERROR         a step raised where eager did not, or the harness failed (a defect)

An op (or module) takes the worst of its samples' verdicts in that order of severity:
MISMATCH, ERROR, NOT-REPLAYED, REFUSED, PASS. Ops: the function variant and the in-place
variant, forward only; the results and the inputs after the op. Modules: training mode,
the forward outputs, the parameter and input gradients of the sum of the outputs, and the
buffers after the step.

Usage::

    python tools/replay_sweep.py ops [--only add,mm] [--start I|name] [--limit N]
        [--samples K] [--jobs J]
        [--json out.json] [--skip done.json ...] [--merge a.json ...] [--tolerance] [-v]
        [--elementwise] [--dtypes float32,float16,...] [--variants plain,nan,inf,...]
    python tools/replay_sweep.py modules [--only nn.Linear] [--limit N] [--samples K] ...

``--dtypes`` and ``--variants`` run the ops' samples in other dtypes than float32 and
with ``tools/special_sweep.py``'s special values (NaN, +-inf, -0 and subnormals, the
dtype's maximum, halfway values) written into their float tensors: the special-value
sweep under replay. ``--elementwise`` keeps OpInfo's elementwise and reduction ops.
``--tolerance`` (opt-in) lets non-elementwise float results within the dtype's
``assert_close`` tolerance pass.

The results so far are rewritten to ``out.json.partial`` after each op; ``--skip`` resumes
an interrupted sweep from it (what it holds is counted, not run again).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch
from moduleinfo_sweep import _select
from opinfo_device import (
    _Copier,
    _first_line,
    _RandomOpSpy,
    _run,
    _tensors,
    _time_limit,
    find_ops,
    op_id,
    unspecified_reason,
)
from replay_modules import check_module, find_modules
from replay_special import RUN_DTYPES, RUN_VARIANTS, Injector, cases
from replay_special import made as made_in
from replay_steps import (
    DEFAULT_SAMPLES,
    SEED,
    STEPS,
    TIMEOUT_S,
    TOLERANCE,
    VERDICTS,
    cpu,
    judge,
    sweep_settings,
    under_replay,
    verdict_of,
)
from special_sweep import DTYPES, _is_elementwise
from special_sweep import is_elementwise_or_reduction as _elementwise_or_reduction

__all__ = ["STEPS", "VERDICTS", "check_module", "check_op", "find_modules", "main",
           "sweep_settings"]


# --- ops ---------------------------------------------------------------------------------


def _op_sample(fn: Callable, sample: Any, tolerance: bool) -> tuple[str, str] | None:
    """One sample of one variant: None when eager itself refuses it or draws random numbers;
    else the verdict and its detail. The results and the inputs after the op must have
    eager's bits (``tolerance``: float results within the dtype's tolerance pass)."""
    spy = _RandomOpSpy()
    ref = _run(fn, sample, _Copier(False, False), spy)
    if spy.random or ref.error is not None:
        return None
    want = (cpu(ref.out), [t.cpu() for t in _tensors(ref.inputs)])

    def step(i: int) -> Any:
        r = _run(fn, sample, _Copier(False, False))
        if r.error is not None:
            raise r.error
        return cpu(r.out), cpu(_tensors(r.inputs))

    def compare_step(i: int, got: Any) -> str | None:
        bad = judge(want[0], got[0], tolerance)
        if bad is None:
            bad = judge(want[1], got[1], tolerance)
            bad = None if bad is None else "input after the op " + bad
        return bad

    return under_replay(step, compare_step)


def check_op(op: Any, samples: int = DEFAULT_SAMPLES, timeout: int = 0) -> dict[str, Any]:
    """Every variant of up to ``samples`` samples of ``op`` under replay, per dtype of
    ``RUN_DTYPES`` and special-value variant of ``RUN_VARIANTS`` (float32, plain: the
    default)."""
    res: dict[str, Any] = {"name": op_id(op), "status": "skipped", "samples": {}, "first": {}}
    reason = unspecified_reason(op)
    supported = op.supported_dtypes("cpu")
    dnames = [d for d in RUN_DTYPES if DTYPES[d] in supported]
    if reason is None and not dnames:
        reason = "no " + " or ".join(RUN_DTYPES)
    if reason is not None:
        res["reason"] = reason
        return res
    counts: collections.Counter[str] = collections.Counter()
    tolerance = TOLERANCE and not _is_elementwise(op)
    labelled = RUN_DTYPES != ["float32"] or RUN_VARIANTS != ["plain"]
    try:
        with _time_limit(timeout):
            variants = [("fn", op.op)]
            if op.inplace_variant is not None:
                variants.append(("inplace", op.inplace_variant))
            for dname in dnames:
                try:
                    torch.manual_seed(SEED)
                    made = made_in(op, DTYPES[dname])
                except Exception as e:  # noqa: BLE001 - (sparse CSR samples): not counted
                    res["reason"] = f"no {dname} samples on the device: {_first_line(e)}"
                    continue
                chosen = _select(made, samples)
                for special in cases(dname):
                    for i, sample in enumerate(chosen):
                        if special != "plain":
                            sample = sample.transform(Injector(special))
                        tag = f"{dname}/{special}/" if labelled else ""
                        for label, fn in variants:
                            got = _op_sample(fn, sample, tolerance)
                            if got is None:
                                continue
                            counts[got[0]] += 1
                            res["first"].setdefault(got[0], f"{tag}{label}#{i}: {got[1]}")
    except Exception as e:  # noqa: BLE001 - never let one op stop the sweep
        counts["ERROR"] += 1
        res["first"].setdefault("ERROR", f"harness: {_first_line(e)} "
                                + traceback.format_exc(limit=2)[-300:])
    res["samples"] = dict(counts)
    res["status"] = verdict_of(counts)
    return res


# --- driver ------------------------------------------------------------------------------


def _names(suite: str, only: str, limit: int, elementwise: bool = False,
           start: str = "") -> list[str]:
    """The names to run, in OpInfo's (ModuleInfo's) order; ``start`` (an index, 0-based,
    or a name) drops the entries before it, so a sweep that stopped can go on from there
    without its results file."""
    wanted = [n for n in only.split(",") if n] or None
    names = ([op_id(o) for o in find_ops(wanted)
              if not elementwise or _elementwise_or_reduction(o)] if suite == "ops"
             else [m.name for m in find_modules(wanted)])
    names = list(dict.fromkeys(names))
    if start:
        if start.isdigit():
            at = int(start)
        elif start in names:
            at = names.index(start)
        else:
            raise SystemExit(f"--start {start!r}: no such {suite[:-1]} in the selection; "
                             "expected an index or one of its names (see --limit 0 -v)")
        names = names[at:]
    return names[:limit] if limit else names


def _worker(suite: str, names: list[str], samples: int, timeout: int) -> None:
    import torchneuron  # noqa: F401 - registers the neuron device
    from torchneuron.hardware.settings import override

    by_name = ({op_id(o): o for o in find_ops(names)} if suite == "ops"
               else {m.name: m for m in find_modules(names)})
    check = check_op if suite == "ops" else check_module
    with override(**sweep_settings()):
        for name in names:
            print("START " + name, flush=True)
            t0 = time.perf_counter()
            r = check(by_name[name], samples, timeout)
            r["seconds"] = round(time.perf_counter() - t0, 2)
            print("RESULT " + json.dumps(r), flush=True)


def _run_isolated(suite: str, names: list[str], flags: list[str], env: dict[str, str],
                  out: dict[str, dict[str, Any]], lock: threading.Lock, verbose: bool,
                  partial: str) -> None:
    """Run ``names`` in a worker process, restarting it after a hard crash (an abort costs
    one op, not the sweep), as ``tools/opinfo_device.py`` does."""
    todo = list(names)
    while todo:
        cmd = [sys.executable, __file__, suite, "--worker", "--only", ",".join(todo), *flags]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        assert proc.stdout is not None
        current: str | None = None
        for line in proc.stdout:
            if line.startswith("START "):
                current = line[6:].strip()
            elif line.startswith("RESULT "):
                r = json.loads(line[7:])
                _record(r, out, lock, verbose, partial)
                todo.remove(r["name"])
                current = None
        _, err = proc.communicate()
        if not todo:
            break
        crashed = current if current is not None else todo[0]
        tail = [ln for ln in err.splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"]
        _record({"name": crashed, "status": "ERROR", "samples": {"ERROR": 1},
                 "first": {"ERROR": f"process died: {tail[0][:200]}"}}, out, lock, verbose,
                partial)
        todo.remove(crashed)


def _record(r: dict[str, Any], out: dict[str, dict[str, Any]], lock: threading.Lock,
            verbose: bool, partial: str) -> None:
    """Keep ``r``; rewrite the results so far to ``partial`` (an interrupted sweep resumes
    from it with ``--skip``)."""
    with lock:
        out[r["name"]] = r
        if partial:
            with open(partial, "w") as fh:
                json.dump({"results": out}, fh)
        if verbose:
            first = r["first"].get(r["status"], r.get("reason", ""))
            print(f"{r['status']:>13} {r.get('seconds', 0):7.1f}s {r['name']:<32} "
                  f"{r['samples']} {first[:160]}", flush=True)


def report(suite: str, results: dict[str, dict[str, Any]], seconds: float) -> dict[str, Any]:
    """Print the defects, refusals and totals; the summary for the JSON."""
    ops = collections.Counter(r["status"] for r in results.values())
    samples: collections.Counter[str] = collections.Counter()
    for r in results.values():
        samples.update(r["samples"])
    for verdict in VERDICTS[:-1]:
        names = sorted(n for n, r in results.items() if r["status"] == verdict)
        if names:
            print(f"\n{verdict} ({len(names)}):")
            for n in names:
                print(f"  {n}: {results[n]['samples']} {results[n]['first'][verdict][:300]}")
    skipped = sorted(n for n, r in results.items() if r["status"] in ("skipped", "no-samples"))
    print(f"\nnot counted ({len(skipped)}): {', '.join(skipped)}")
    unit = "ops" if suite == "ops" else "modules"
    print(f"\nreplay sweep, {suite}: " + ", ".join(f"{ops[v]} {v}" for v in VERDICTS)
          + f" {unit} of {sum(ops[v] for v in VERDICTS)}; samples: "
          + ", ".join(f"{samples[v]} {v}" for v in VERDICTS)
          + f"; {seconds:.0f}s")
    return {"suite": suite, "ops": dict(ops), "samples": dict(samples), "seconds": seconds,
            "results": results}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("suite", choices=("ops", "modules"))
    p.add_argument("--only", default="", help="comma-separated names (op or op.variant; "
                   "nn.Linear or Linear)")
    p.add_argument("--limit", type=int, default=0, help="only the first N")
    p.add_argument("--start", default="", help="begin at this entry: an index into the "
                   "selection (0-based) or a name (with --limit: the N from there)")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                   help=f"samples per op or module, spread evenly (0: all; default "
                   f"{DEFAULT_SAMPLES})")
    p.add_argument("--jobs", type=int, default=1, help="worker processes side by side")
    p.add_argument("--timeout", type=int, default=TIMEOUT_S, help="seconds per op or module")
    p.add_argument("--json", default="", help="write per-op results and the totals here")
    p.add_argument("--skip", nargs="+", default=[], help="JSON files (results or their "
                   ".partial): what they hold is not run again, and is counted")
    p.add_argument("--merge", nargs="+", default=[], help="only report these JSON files")
    p.add_argument("--tolerance", action="store_true", help="a non-elementwise op's or a "
                   "module's float results within the dtype's assert_close tolerance pass "
                   "(default: eager's bits)")
    p.add_argument("--elementwise", action="store_true", help="ops: only OpInfo's "
                   "elementwise and reduction ops (ufunc and reduction OpInfos)")
    p.add_argument("--dtypes", default="float32", help="ops: the samples' dtypes")
    p.add_argument("--variants", default="plain", help="ops: special values written into "
                   "the samples (tools/special_sweep.py's: plain,nan,inf,zero,big,round,int)")
    p.add_argument("-v", "--verbose", action="store_true", help="print each as it ends")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    RUN_DTYPES[:] = a.dtypes.split(",")
    RUN_VARIANTS[:] = a.variants.split(",")
    names = _names(a.suite, a.only, a.limit, a.elementwise, a.start)
    results: dict[str, dict[str, Any]] = {}
    for path in a.skip + a.merge:
        with open(path) as fh:
            results.update(json.load(fh)["results"])
    if a.merge:
        report(a.suite, results, 0.0)
        return 0
    names = [n for n in names if n not in results]
    if a.worker:
        _worker(a.suite, names, a.samples, a.timeout)
        return 0
    t0 = time.perf_counter()
    flags = ["--samples", str(a.samples), "--timeout", str(a.timeout),
             "--dtypes", a.dtypes, "--variants", a.variants]
    env = dict(os.environ)
    cache = tempfile.mkdtemp(prefix="replay-sweep-cache-")  # verdicts of this run only
    env["TORCHNEURON_CACHE_DIR"] = cache
    if a.tolerance:
        env["REPLAY_SWEEP_TOLERANCE"] = "1"
    lock = threading.Lock()
    partial = a.json + ".partial" if a.json else ""
    jobs = max(1, min(a.jobs, len(names) or 1))
    threads = [threading.Thread(target=_run_isolated, args=(
        a.suite, names[j::jobs], flags, env, results, lock, a.verbose, partial))
        for j in range(jobs)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    ordered = {n: results[n] for n in _names(a.suite, a.only, a.limit, a.elementwise,
                                             a.start) if n in results}
    summary = report(a.suite, ordered, time.perf_counter() - t0)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(summary, fh, indent=1, sort_keys=True)
    return 1 if summary["ops"].get("MISMATCH") or summary["ops"].get("ERROR") else 0


if __name__ == "__main__":
    sys.exit(main())
