"""OpInfo and ModuleInfo under replay: every sample inside a region adaptive eager replays.

Why: ``tools/opinfo_device.py`` and ``tools/moduleinfo_sweep.py`` prove the device equal
to CPU eagerly, and ``tools/lowering_coverage.py`` proves the compiler equal to eager one
graph at a time; but adaptive eager captures a user's op stream itself, compiles the
regions that repeat and replays their programs on every later step. Its capture
(dataflow, aliases, in-place writes, scalars baked into guards) is a second front end to
the compiler, and a wrong number there is as wrong as anywhere. This sweep runs PyTorch's
op and module suites inside such regions and compares each step's results with eager
on the device.

Each sample runs ``STEPS`` times in a loop under ``torchneuron.adaptive_eager`` (up to
``MAX_STEPS`` while its regions still learn their variants from side exits), one
step per iteration ending in a read of its results (a sync ends the region), with the
compile latency off and the first tier off (``override(compile_latency=False,
ae_first_tier=False)``: the program is ready at once and replays are program replays),
no minimum gain (a one-op region is compiled) and first-replay verification off (the
program's own numbers reach the comparison). Every step's results are compared with the
same sample run eagerly on the device: bit for bit for elementwise ops (as
``tools/special_sweep.py`` expects), else with ``torch.testing.assert_close``'s float32
tolerance (as ``tools/opinfo_device.py``). Per sample:

  PASS          a compiled program replayed (``stats()``: a replay not in the first tier)
                and every step equals eager
  MISMATCH      some step differs from eager (a defect)
  REFUSED       the compiler refused the region or an op in it (typed, counted, run
                eagerly); every step equals eager
  NOT-REPLAYED  no program replay, not for a refusal (the reason: ``explain()``)
  ERROR         a step raised where eager did not, or the harness failed (a defect)

An op (or module) takes the worst of its samples' verdicts in that order of severity:
MISMATCH, ERROR, NOT-REPLAYED, REFUSED, PASS. Ops: the function variant and the in-place
variant, forward only. Modules: training mode, the forward outputs, the parameter and
input gradients of the sum of the outputs, and the buffers after the step.

Usage::

    python tools/replay_sweep.py ops [--only add,mm] [--start I|name] [--limit N]
        [--samples K] [--jobs J]
        [--json out.json] [--skip done.json ...] [--merge a.json ...] [--exact] [-v]
        [--elementwise] [--dtypes float32,float16,...] [--variants plain,nan,inf,...]
    python tools/replay_sweep.py modules [--only nn.Linear] [--limit N] [--samples K] ...

``--dtypes`` and ``--variants`` run the ops' samples in other dtypes than float32 and
with ``tools/special_sweep.py``'s special values (NaN, +-inf, -0 and subnormals, the
dtype's maximum, halfway values) written into their float tensors: the special-value
sweep under replay. ``--elementwise`` keeps OpInfo's elementwise and reduction ops.

The results so far are rewritten to ``out.json.partial`` after each op; ``--skip`` resumes
an interrupted sweep from it (what it holds is counted, not run again).
"""

from __future__ import annotations

import argparse
import collections
import copy
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
from moduleinfo_sweep import _Copier as _ModuleCopier
from moduleinfo_sweep import _select, _sum_of_outputs, find_modules
from moduleinfo_sweep import _tensors as _module_tensors
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
from replay_special import RUN_DTYPES, RUN_VARIANTS, Injector, cases
from replay_special import made as made_in
from special_sweep import DTYPES, _is_elementwise, compare
from special_sweep import is_elementwise_or_reduction as _elementwise_or_reduction

__all__ = ["VERDICTS", "check_module", "check_op", "main", "sweep_settings"]

STEPS = 4  # seen once, seen twice (compiled), then replayed at least twice
# a sample whose last step replayed programs and side-exited runs on, up to this many
# steps: a region whose stream goes on elsewhere at some op (two streams with the same
# first ops) is learned as variants from its exits there (``SwapIn.replay_exited``),
# steps after it first replayed
MAX_STEPS = 7
DEFAULT_SAMPLES = 6
TIMEOUT_S = 300
SEED = 0
EXACT = os.environ.get("REPLAY_SWEEP_EXACT") == "1"  # (--exact) last-bit differences fail
# most severe first: an op takes the first verdict any of its samples has
VERDICTS = ("MISMATCH", "ERROR", "NOT-REPLAYED", "REFUSED", "PASS")


def sweep_settings() -> dict[str, Any]:
    """The settings under which every replay is a replay of a compiled program."""
    return {"compile_latency": False, "ae_first_tier": False, "ae_min_gain_ns": -1,
            "ae_verify_first_replay": False, "verify": False}


def _refused(stats: dict[str, Any]) -> bool:
    """Did the compiler refuse a region or an op of the sample (run eagerly, counted)?"""
    return bool(stats["refused_ops"] or stats["compile_failures"]
                or stats["fallback_reasons"].get("compile-failed")
                or stats["fallback_reasons"].get("capture-failed"))


def _about(explained: str, region: Any) -> str:
    """The lines of ``explain()`` about ``region`` (all of it when there is none)."""
    if region is None:
        return explained
    lines = explained.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"region {region.key}")),
                 None)
    if start is None:
        why = region.reason.message if region.reason is not None else "no reason recorded"
        return f"state {region.state.value}, seen {region.times_seen}x: {why} {region.detail}"
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")),
               len(lines))
    return " | ".join(ln.strip() for ln in lines[start:end])


def _why_not(stats: dict[str, Any], explained: str, full: str = "") -> tuple[str, str]:
    """(REFUSED or NOT-REPLAYED, the reason) for a sample whose computation did not
    replay as a program, or replayed only in part around refused ops."""
    refused = stats["refused_ops"]
    reasons = stats["fallback_reasons"]
    if _refused(stats):
        whys = [ln.strip().removeprefix("why not swapped in: ") for ln in full.splitlines()
                if "why not swapped in: c" in ln]  # compile-failed, capture-failed
        why = "; ".join(f"{k}: {v}" for k, v in refused.items()) or "; ".join(whys) or \
            f"reasons {reasons}, {stats['compile_failures']} compile failures: {explained}"
        return "REFUSED", why[:400]
    return "NOT-REPLAYED", (f"reasons {reasons}: " if reasons else "") + explained[:400]


def _counters() -> tuple[int, int, int]:
    """(program replays, ops run eagerly: recorded, between regions or at side exits)."""
    import torchneuron.adaptive_eager as ae

    s = ae.stats()
    return (s["replays"] - s["first_tier_replays"],
            s["ops_recorded"] + s["ops_between_regions"], s["side_exits"])


def _under_replay(step: Callable[[int], Any], compare_step: Callable[[int, Any], str | None],
                  ) -> tuple[str, str]:
    """Run ``step(i)`` for ``STEPS`` iterations under adaptive eager (and on, up to
    ``MAX_STEPS``, while the last step replayed programs and side-exited); verdict and
    detail.

    ``step`` returns the step's results already on the CPU (the read ends the region);
    ``compare_step`` says how they differ from eager (None: equal). The sample replayed
    when its last step ran as compiled programs only: a program replay, no op recorded
    or run between regions, no side exit (the reads between its results are syncs, and
    the few ops between two of them are regions too, so one replay alone proves little).
    """
    import torchneuron
    import torchneuron.adaptive_eager as ae

    ae.disable()
    torchneuron.reset()
    replayed_steps: list[int] = []
    mismatch: str | None = None
    last = (0, 0, 0)
    try:
        with ae.enabled():
            for i in range(MAX_STEPS):
                if i >= STEPS and not (last[0] and last[2]):
                    break
                before = _counters()
                got = step(i)
                last = tuple(b - a for a, b in zip(before, _counters(), strict=True))
                if last[0]:
                    replayed_steps.append(i)
                why = compare_step(i, got)
                if why is not None and mismatch is None:
                    kind = "replayed" if i in replayed_steps else "not replayed"
                    mismatch = f"step {i} ({kind}): {why}"
        stats, explained = ae.stats(), ae.explain()
        ran_ops = stats["ops_recorded"] + stats["ops_deferred"] + stats["ops_between_regions"]
        main = max((r for r in ae.regions() if r.times_seen > 1), key=len, default=None)
    except Exception as e:  # noqa: BLE001 - eager ran this sample: raising here is a defect
        ae.disable()
        return "ERROR", _first_line(e)
    finally:
        ae.reset()
    if mismatch is not None:
        return "MISMATCH", mismatch
    if not ran_ops:  # (broadcast_shapes): nothing ran on the device, nothing to replay
        return "no-device-ops", "the sample runs no op on the device"
    replays, eager_ops, exits = last
    if not replays or eager_ops or exits or _refused(stats):
        verdict, why = _why_not(stats, _about(explained, main), explained)
        return verdict, (f"last step: {replays} program replays, {eager_ops} ops eagerly, "
                         f"{exits} side exits; {why}")
    return "PASS", f"program replays at steps {replayed_steps}"


# --- ops ---------------------------------------------------------------------------------


def _op_sample(fn: Callable, sample: Any, exact: bool) -> tuple[str, str, str | None] | None:
    """One sample of one variant: None when eager itself refuses it or draws random numbers;
    else the verdict, its detail and, for an elementwise op within tolerance, its first
    last-bit difference from eager (``LAST-BIT``: counted and listed, not a MISMATCH, as
    ``tools/lowering_coverage.py`` takes them; ``--exact`` makes them MISMATCHes)."""
    spy = _RandomOpSpy()
    ref = _run(fn, sample, _Copier(False, False), spy)
    if spy.random or ref.error is not None:
        return None
    want = (_cpu(ref.out), [t.cpu() for t in _tensors(ref.inputs)])

    def step(i: int) -> Any:
        r = _run(fn, sample, _Copier(False, False))
        if r.error is not None:
            raise r.error
        return _cpu(r.out), _cpu(_tensors(r.inputs))

    last_bits: list[str] = []

    def differs(strict: bool, got: Any) -> str | None:
        bad = compare(want[0], got[0], strict)
        if bad is None:
            bad = compare(want[1], got[1], strict)
            bad = None if bad is None else (bad[0], "input after the op " + bad[1])
        return None if bad is None else f"{bad[0]}: {bad[1]}"

    def compare_step(i: int, got: Any) -> str | None:
        bad = differs(False, got)
        if bad is None and exact and not last_bits:
            note = differs(True, got)
            if note is not None:
                last_bits.append(f"step {i}: {note}")
        return bad

    verdict, detail = _under_replay(step, compare_step)
    return verdict, detail, (last_bits[0] if last_bits else None)


def _cpu(tree: Any) -> Any:
    """The tensors of ``tree`` read to the CPU, with no op before the read (a ``detach``
    there would be a one-op region of the harness's own, exiting at the read)."""
    from torch.utils._pytree import tree_map

    with torch.no_grad():
        return tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, tree)


def _verdict(counts: collections.Counter[str]) -> str:
    return next((v for v in VERDICTS if counts[v]), "no-samples")


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
    exact = _is_elementwise(op)
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
                            got = _op_sample(fn, sample, exact)
                            if got is None:
                                continue
                            verdict, detail, last_bit = got
                            if last_bit is not None:
                                counts["LAST-BIT"] += 1
                                res["first"].setdefault("LAST-BIT",
                                                        f"{tag}{label}#{i}: {last_bit}")
                                verdict = "MISMATCH" if EXACT else verdict
                                detail = last_bit if EXACT else detail
                            counts[verdict] += 1
                            res["first"].setdefault(verdict, f"{tag}{label}#{i}: {detail}")
    except Exception as e:  # noqa: BLE001 - never let one op stop the sweep
        counts["ERROR"] += 1
        res["first"].setdefault("ERROR", f"harness: {_first_line(e)} "
                                + traceback.format_exc(limit=2)[-300:])
    res["samples"] = dict(counts)
    res["status"] = _verdict(counts)
    return res


# --- modules -----------------------------------------------------------------------------


def _module_results(module: torch.nn.Module, outs: Any, leaves: list[torch.Tensor],
                    ) -> dict[str, Any]:
    """Outputs, parameters and their gradients, buffers, input gradients: on the CPU."""
    with torch.no_grad():  # reads only (see _cpu)
        got: dict[str, Any] = {"out": [t.cpu() for t in _module_tensors(outs)]}
        for name, p in module.named_parameters():
            got[f"param {name}"] = p.cpu()
            got[f"grad {name}"] = None if p.grad is None else p.grad.cpu()
        for name, b in module.named_buffers():
            got[f"buffer {name}"] = b.cpu()
        for i, t in enumerate(leaves):
            got[f"input grad {i}"] = None if t.grad is None else t.grad.cpu()
    return got


def _module_step(module: torch.nn.Module, start: dict[str, torch.Tensor], inputs: Any,
                 leaves: list[torch.Tensor]) -> dict[str, Any]:
    """One training step from the same state: buffers restored, gradients cleared.

    The inputs are the same device leaves every step (gradients cleared): fresh copies
    would put ``requires_grad_`` (a boundary) into the step, a side exit of the harness.
    """
    with torch.no_grad():
        for name, b in module.named_buffers():
            b.copy_(start[name])
    for t in (*module.parameters(), *leaves):
        t.grad = None
    torch.manual_seed(SEED)
    outs = module(*inputs[0], **inputs[1])
    loss = _sum_of_outputs(_module_tensors(outs))
    if loss is not None:
        loss.backward()
    return _module_results(module, outs, leaves)


def _module_sample(info: Any, sample: Any) -> tuple[str, str] | None:
    torch.manual_seed(SEED)
    ctor = sample.constructor_input
    try:
        built = info.module_cls(*ctor.args, **ctor.kwargs).to(torch.float32)
        built.train(True)
        if any(isinstance(t, torch.nn.parameter.UninitializedTensorMixin)
               for t in (*built.parameters(), *built.buffers())):
            # a lazy module initializes on its first call; a copy of it on the device would
            # still hold CPU placeholders: initialize it once on the CPU, then copy
            args, kwargs = _ModuleCopier("cpu")(
                (sample.forward_input.args, sample.forward_input.kwargs))
            built(*args, **kwargs)
        dev = copy.deepcopy(built).to("neuron")
        on_device = _ModuleCopier("neuron")
        inputs = (on_device(sample.forward_input.args), on_device(sample.forward_input.kwargs))
        leaves = [y for _, y in on_device.leaves if y.requires_grad]
        start = {k: v.detach().clone() for k, v in dev.named_buffers()}
        eager_mod = copy.deepcopy(dev)
        want = _module_step(eager_mod, start, inputs, leaves)
    except Exception:  # noqa: BLE001 - a sample eager refuses is not the replay's
        return None
    replay_mod = copy.deepcopy(dev)

    def compare_step(i: int, got: dict[str, Any]) -> str | None:
        if got.keys() != want.keys():
            return f"results {sorted(got)} != eager's {sorted(want)}"
        for k, w in want.items():
            if (w is None) != (got[k] is None):
                return f"{k}: {'no ' if got[k] is None else ''}value, eager has " + \
                    ("none" if w is None else "one")
            bad = None if w is None else compare(w, got[k], exact=False)
            if bad is not None:
                return f"{k}: {bad[0]}: {bad[1]}"
        return None

    return _under_replay(lambda i: _module_step(replay_mod, start, inputs, leaves),
                         compare_step)


def check_module(info: Any, samples: int = DEFAULT_SAMPLES, timeout: int = 0) -> dict[str, Any]:
    """Up to ``samples`` training-mode float32 samples of ``info`` under replay."""
    res: dict[str, Any] = {"name": info.name, "status": "skipped", "samples": {}, "first": {}}
    if torch.float32 not in info.supported_dtypes("cpu"):
        res["reason"] = "no float32"
        return res
    counts: collections.Counter[str] = collections.Counter()
    try:
        with _time_limit(timeout):
            torch.manual_seed(SEED)
            chosen = _select(list(info.module_inputs_func(
                info, device="cpu", dtype=torch.float32, requires_grad=True, training=True)),
                samples)
            for i, sample in enumerate(chosen):
                got = _module_sample(info, sample)
                if got is None:
                    continue
                counts[got[0]] += 1
                res["first"].setdefault(got[0], f"#{i} ({sample.desc or 'default'}): {got[1]}")
    except Exception as e:  # noqa: BLE001 - never let one module stop the sweep
        counts["ERROR"] += 1
        res["first"].setdefault("ERROR", f"harness: {_first_line(e)}")
    res["samples"] = dict(counts)
    res["status"] = _verdict(counts)
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
    last_bit = sorted(n for n, r in results.items() if r["samples"].get("LAST-BIT"))
    if last_bit:
        print(f"\nLAST-BIT: elementwise ops within tolerance, not eager's bits "
              f"({len(last_bit)}):")
        for n in last_bit:
            print(f"  {n}: {results[n]['samples']['LAST-BIT']} samples; "
                  f"{results[n]['first']['LAST-BIT'][:200]}")
    print(f"\nnot counted ({len(skipped)}): {', '.join(skipped)}")
    unit = "ops" if suite == "ops" else "modules"
    print(f"\nreplay sweep, {suite}: " + ", ".join(f"{ops[v]} {v}" for v in VERDICTS)
          + f" {unit} of {sum(ops[v] for v in VERDICTS)}; samples: "
          + ", ".join(f"{samples[v]} {v}" for v in VERDICTS)
          + f" ({samples['LAST-BIT']} of them LAST-BIT in {len(last_bit)} {unit}); "
          f"{seconds:.0f}s")
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
    p.add_argument("--exact", action="store_true", help="a last-bit difference of an "
                   "elementwise op is a MISMATCH (default: counted as LAST-BIT)")
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
    if a.exact:
        env["REPLAY_SWEEP_EXACT"] = "1"
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
