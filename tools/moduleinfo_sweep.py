"""ModuleInfo sweep: every ``torch.nn`` module of PyTorch's ModuleInfo database, neuron vs CPU.

Why: ``module_db`` (``torch.testing._internal.common_modules``) holds constructor
and forward inputs for every ``torch.nn`` module, the modules users actually train.
Running each in training mode on ``neuron`` against the same module on CPU with
identical parameters is the device's acceptance bar for modules (DESIGN.md
section 9), and, with ``--mode compile``, the compiler's.

For each module and each selected float32 sample: the module is built on CPU
(seeded), deep-copied and moved to ``neuron`` (``--mode eager``) or additionally
wrapped in ``torch.compile(backend="neuron")`` (``--mode compile``, Dynamo reset
per sample, so no sample silently runs eagerly past Dynamo's recompile limit; the
compile counters -- graphs compiled, compile failures by stage, eager fallback runs,
graph breaks -- are reported per module; a module with any compile failure or eager
fallback run fails, even when its numbers match, since the bar is "compiles with no
failure and matches CPU"). Both run the same forward inputs (tensors copied, aliases kept), each
forward seeded the same way (lazy modules initialize and dropout draws
identically). Compared with ``torch.testing.assert_close``: every forward output
(floating outputs must live on ``neuron``), parameters and buffers after the
forward (BatchNorm's running stats), and after ``backward`` of the sum of all
differentiable outputs, every parameter gradient and input gradient.

A sample that raises on CPU is not held against the device (a module none of whose
samples runs on CPU is left out of the denominator). Each module runs under a time
limit, in a worker process that is restarted if it crashes, so one abort costs one
module, not the sweep.

Usage::

    python tools/moduleinfo_sweep.py [--mode eager|compile] [--only nn.Linear,nn.LSTM]
        [--samples N] [--json out.json] [--timeout S] [--cache-dir DIR] [-v]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from opinfo_device import _first_line, _time_limit
from torch.nn.utils.rnn import PackedSequence

__all__ = ["ModuleResult", "check_module", "find_modules", "main"]

DTYPE = torch.float32
DEFAULT_SAMPLES = 12
PER_MODULE_TIMEOUT_S = 300
SEED = 0
MODES = ("eager", "compile")


@dataclass
class ModuleResult:
    """The verdict for one ModuleInfo entry."""

    module: str
    status: str  # pass | fail | crash | no-samples | cpu-only-errors | no-float32
    reason: str = ""
    samples: int = 0  # samples compared (ran on CPU)
    seconds: float = 0.0
    compile: dict[str, Any] = field(default_factory=dict)  # --mode compile: graph counts
    details: list[str] = field(default_factory=list)


class _Copier:
    """Copy a (nested) input to a device: fresh leaves, same requires_grad, aliases kept."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.memo: dict[int, torch.Tensor] = {}
        self.leaves: list[tuple[torch.Tensor, torch.Tensor]] = []  # (source, copy)

    def tensor(self, x: torch.Tensor) -> torch.Tensor:
        if id(x) not in self.memo:
            y = x.detach().clone().to(self.device).requires_grad_(x.requires_grad)
            self.memo[id(x)] = y
            self.leaves.append((x, y))
        return self.memo[id(x)]

    def __call__(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return self.tensor(x)
        if isinstance(x, PackedSequence):  # batch_sizes stays on CPU, as PyTorch requires
            return x._replace(
                data=self(x.data),
                sorted_indices=self(x.sorted_indices),
                unsorted_indices=self(x.unsorted_indices),
            )
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return type(x)(*(self(v) for v in x))
        if isinstance(x, (list, tuple)):
            return type(x)(self(v) for v in x)
        if isinstance(x, dict):
            return {k: self(v) for k, v in x.items()}
        return x


def _tensors(tree: Any) -> list[torch.Tensor]:
    """Every tensor in an output, in order (PackedSequence and namedtuples included)."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in _tensors(v)]
    if isinstance(tree, dict):
        return [t for k in tree for t in _tensors(tree[k])]
    return []


def _close(actual: torch.Tensor | None, expected: torch.Tensor | None, what: str) -> None:
    if expected is None or actual is None:
        if (expected is None) != (actual is None):
            raise AssertionError(
                f"{what}: neuron has {'no ' if actual is None else ''}value, "
                f"CPU has {'none' if expected is None else 'one'}"
            )
        return
    if actual.is_floating_point() and actual.device.type != "neuron":
        raise AssertionError(f"{what}: on {actual.device}, expected a neuron tensor")
    try:
        torch.testing.assert_close(actual.detach().cpu(), expected.detach(), equal_nan=True)
    except AssertionError as e:
        raise AssertionError(f"{what}: {_first_line(e)} ({str(e).splitlines()[-1].strip()})") from None


def _sum_of_outputs(outs: list[torch.Tensor]) -> torch.Tensor | None:
    diff = [o for o in outs if o.requires_grad and o.is_floating_point()]
    if not diff:
        return None
    return torch.stack([o.sum() for o in diff]).sum()


def _run_on(module: torch.nn.Module, sample: Any, device: str) -> tuple[Any, _Copier]:
    copier = _Copier(device)
    args = copier(sample.forward_input.args)
    kwargs = copier(sample.forward_input.kwargs)
    torch.manual_seed(SEED)  # seeds the CPU and the neuron generators alike
    return module(*args, **kwargs), copier


def _compare_sample(info: Any, sample: Any, mode: str) -> bool:
    """One sample, neuron against CPU; False when CPU itself refuses it. Raises on mismatch."""
    torch.manual_seed(SEED)
    ctor = sample.constructor_input
    try:
        ref = info.module_cls(*ctor.args, **ctor.kwargs).to(DTYPE)
        ref.train(True)
        dev = copy.deepcopy(ref)
        out_ref, ref_in = _run_on(ref, sample, "cpu")
        loss_ref = _sum_of_outputs(_tensors(out_ref))
        if loss_ref is not None:
            loss_ref.backward()
    except Exception:  # noqa: BLE001 - a sample CPU refuses is not the device's
        return False
    dev = dev.to("neuron")
    runner: Any = dev
    if mode == "compile":
        # A fresh module per sample is a recompile for Dynamo; past its recompile
        # limit it would run the sample eagerly without saying so. Start clean instead.
        from torch._dynamo import reset

        reset()
        runner = torch.compile(dev, backend="neuron")
    out_dev, dev_in = _run_on(runner, sample, "neuron")
    outs_ref, outs_dev = _tensors(out_ref), _tensors(out_dev)
    if len(outs_ref) != len(outs_dev):
        raise AssertionError(f"{len(outs_dev)} output tensors, CPU gives {len(outs_ref)}")
    for i, (a, e) in enumerate(zip(outs_dev, outs_ref, strict=True)):
        _close(a, e, f"output {i}")
    loss_dev = _sum_of_outputs(outs_dev)
    if (loss_dev is None) != (loss_ref is None):
        raise AssertionError("differentiable outputs differ from CPU's")
    if loss_dev is not None:
        loss_dev.backward()
    params_ref, params_dev = dict(ref.named_parameters()), dict(dev.named_parameters())
    if params_ref.keys() != params_dev.keys():
        raise AssertionError(f"parameters {sorted(params_dev)} != CPU's {sorted(params_ref)}")
    for name, p in params_ref.items():
        _close(params_dev[name], p, f"parameter {name}")
        _close(params_dev[name].grad, p.grad, f"grad of parameter {name}")
    bufs_ref, bufs_dev = dict(ref.named_buffers()), dict(dev.named_buffers())
    if bufs_ref.keys() != bufs_dev.keys():
        raise AssertionError(f"buffers {sorted(bufs_dev)} != CPU's {sorted(bufs_ref)}")
    for name, b in bufs_ref.items():
        _close(bufs_dev[name], b, f"buffer {name}")
    for i, ((_, r), (_, d)) in enumerate(zip(ref_in.leaves, dev_in.leaves, strict=True)):
        if r.requires_grad:
            _close(d.grad, r.grad, f"grad of input {i}")
    return True


def _select(samples: list[Any], n: int) -> list[Any]:
    """At most ``n`` samples, spread evenly over the list (n <= 0: all)."""
    if n <= 0 or len(samples) <= n:
        return samples
    return [samples[(i * len(samples)) // n] for i in range(n)]


def _compile_counts() -> dict[str, Any]:
    from torch._dynamo.utils import counters

    from torchneuron.compiler.stats import stats

    s = stats()
    return {
        "compilations": s["compilations"],
        "failures": s["failures_by_stage"],
        "eager_fallback_runs": sum(s["eager_fallback_runs"].values()),
        "graph_breaks": sum(counters["graph_break"].values()),
    }


def check_module(
    info: Any, mode: str = "eager", samples: int = DEFAULT_SAMPLES, timeout: int = 0
) -> ModuleResult:
    """Compare up to ``samples`` float32 training-mode samples of ``info`` on neuron vs CPU."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    res = ModuleResult(info.name, "pass")
    if DTYPE not in info.supported_dtypes("cpu"):
        res.status, res.reason = "no-float32", "float32 not supported on CPU"
        return res
    t0 = time.perf_counter()
    if mode == "compile":
        from torch._dynamo import reset
        from torch._dynamo.utils import counters

        from torchneuron.compiler.stats import reset_stats

        reset()
        counters.clear()
        reset_stats()
    ran = 0
    chosen: list[Any] = []
    try:
        with _time_limit(timeout):
            torch.manual_seed(SEED)
            chosen = _select(
                list(info.module_inputs_func(
                    info, device="cpu", dtype=DTYPE, requires_grad=True, training=True
                )),
                samples,
            )
            for i, sample in enumerate(chosen):
                try:
                    ran += _compare_sample(info, sample, mode)
                except Exception as e:  # noqa: BLE001 - record, go on with the next sample
                    msg = f"sample {i} ({sample.desc or 'default'}): {_first_line(e)}"
                    res.details.append(msg)
                    res.reason = res.reason or msg
                    ran += 1
    except Exception as e:  # noqa: BLE001 - never let one module stop the sweep
        res.reason = res.reason or f"harness: {_first_line(e)}"
        res.details.append(traceback.format_exc(limit=3))
        ran = max(ran, 1)
    res.samples = ran
    if res.reason:
        res.status = "fail"
    elif ran == 0:
        res.status = "cpu-only-errors" if chosen else "no-samples"
    if mode == "compile":
        res.compile = _compile_counts()
        fallback = res.compile["failures"] or res.compile["eager_fallback_runs"]
        if res.status == "pass" and fallback:
            # matched CPU, but (partly) eagerly: the bar is "compiles with no failure"
            res.status = "fail"
            res.reason = (f"matches CPU, but graphs ran eagerly: failures "
                          f"{res.compile['failures']}, {res.compile['eager_fallback_runs']} "
                          "eager fallback runs")
    res.seconds = time.perf_counter() - t0
    return res


def find_modules(names: list[str] | None = None) -> list[Any]:
    """ModuleInfo entries, all of them or those named (``nn.Linear`` or ``Linear``)."""
    from torch.testing._internal.common_modules import module_db

    if not names:
        return list(module_db)
    wanted = {n if n.startswith("nn.") else f"nn.{n}" for n in names}
    found = [m for m in module_db if m.name in wanted]
    missing = wanted - {m.name for m in found}
    if missing:
        raise SystemExit(f"not in module_db: {', '.join(sorted(missing))}")
    return found


def _run_isolated(
    names: list[str], flags: list[str], verbose: bool, env: dict[str, str] | None = None
) -> list[ModuleResult]:
    """Run the modules in a worker process, restarting it after a hard crash.

    Why: a C++ abort or a segfault cannot be caught in-process; it must cost one
    module, not the sweep.
    """
    results: list[ModuleResult] = []
    todo = list(names)
    while todo:
        cmd = [sys.executable, __file__, "--worker", "--only", ",".join(todo), *flags]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        assert proc.stdout is not None
        current: str | None = None
        for line in proc.stdout:
            if line.startswith("START "):
                current = line[6:].strip()
            elif line.startswith("RESULT "):
                r = ModuleResult(**json.loads(line[7:]))
                results.append(r)
                todo.remove(r.module)
                current = None
                if verbose:
                    _print(r)
        _, err = proc.communicate()
        if not todo:
            break
        crashed = current if current is not None else todo[0]
        tail = [ln for ln in err.splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"]
        r = ModuleResult(crashed, "crash", reason=f"process died: {tail[0][:200]}", samples=1)
        results.append(r)
        todo.remove(crashed)
        if verbose:
            _print(r)
    return results


def _print(r: ModuleResult) -> None:
    extra = f"  [{r.compile}]" if r.compile else ""
    print(f"{r.status:>15} {r.seconds:6.1f}s {r.module:<28} {r.reason[:150]}{extra}", flush=True)


def summary(results: list[ModuleResult]) -> dict[str, Any]:
    counted = [r for r in results if r.status in ("pass", "fail", "crash")]
    passed = sum(r.status == "pass" for r in counted)
    return {
        "passed": passed,
        "total": len(counted),
        "rate": passed / len(counted) if counted else 1.0,
        "excluded": {r.module: r.status for r in results if r not in counted},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=MODES, default="eager")
    p.add_argument("--only", help="comma-separated module names (nn.Linear or Linear)")
    p.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                   help=f"samples per module, spread evenly (0: all; default {DEFAULT_SAMPLES})")
    p.add_argument("--json", help="write per-module results and the summary here")
    p.add_argument("--timeout", type=int, default=PER_MODULE_TIMEOUT_S, help="seconds per module")
    p.add_argument("--cache-dir", help="executable cache for --mode compile (default: a fresh "
                   "temporary directory, so entries of other runs cannot change the verdicts)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every module as it ends")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    warnings.filterwarnings("ignore")
    infos = find_modules(a.only.split(",") if a.only else None)
    t0 = time.perf_counter()
    if a.worker:
        import torchneuron  # noqa: F401 - registers the neuron device

        for info in infos:
            print("START " + info.name, flush=True)
            r = check_module(info, a.mode, a.samples, a.timeout)
            print("RESULT " + json.dumps(vars(r)), flush=True)
        return 0
    flags = ["--mode", a.mode, "--samples", str(a.samples), "--timeout", str(a.timeout)]
    env = dict(os.environ)
    tmp = None
    if a.mode == "compile":
        tmp = None if a.cache_dir else tempfile.mkdtemp(prefix="moduleinfo-cache-")
        env["TORCHNEURON_CACHE_DIR"] = a.cache_dir or tmp
    try:
        results = _run_isolated([m.name for m in infos], flags, a.verbose, env)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if not a.verbose:
        for r in results:
            _print(r)
    s = summary(results)
    if s["excluded"]:
        print("\nleft out of the denominator (no float32 sample runs on CPU):")
        for name, why in s["excluded"].items():
            print(f"  {name}: {why}")
    print(f"\n{a.mode}: {s['passed']}/{s['total']} modules pass = {100 * s['rate']:.1f}% "
          f"({time.perf_counter() - t0:.0f}s)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"mode": a.mode, "summary": s, "modules": [vars(r) for r in results]},
                      fh, indent=1)
    return 0 if s["passed"] == s["total"] else 1


if __name__ == "__main__":
    sys.exit(main())
