"""How much of PyTorch's OpInfo database gets through our lowering path?

For each op in `op_db`, its first K float32 CPU samples are run eagerly (the reference),
then through prepare -> Torch-MLIR lowering (in the crash-safe worker) and, when
`torchneuron.compiler.stablehlo` is importable, parse + interpret + compare with eager.
An op passes when every one of its samples that works eagerly passes. Ops whose results
are unspecified (empty*, random draws) are skipped and listed.

    .venv/bin/python tools/lowering_coverage.py [--ops a,b] [--limit N] [--samples K]
        [--json out.json] [--no-interpret] [-v]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import sys
import time
import warnings
from typing import Any

import torch
import torch.utils._pytree as pytree

SKIP_PREFIXES = ("empty", "new_empty", "nn.functional.dropout", "nn.functional.alpha_dropout",
                 "nn.functional.feature_alpha_dropout", "bernoulli", "normal", "rand",
                 "multinomial", "uniform", "cauchy", "exponential", "geometric",
                 "log_normal", "randint", "randn", "nn.functional.rrelu", "torch._C._nn.rrelu",
                 "_refs.empty")
SKIP_EXACT = {"new_empty", "new_empty_strided", "empty_like", "empty_strided",
              "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
              "randn_like", "rand_like", "randint_like", "normal", "cauchy", "bernoulli"}


def _skip_reason(op: Any) -> str | None:
    name = op.name
    if name in SKIP_EXACT or name.startswith(SKIP_PREFIXES):
        return "unspecified-or-random"
    return None


def _sample_fn(op: Any, sample: Any) -> tuple[Any, list[torch.Tensor]]:
    """A function of the sample's tensors only (everything else is baked in)."""
    flat, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    pos = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
    tensors = [flat[i] for i in pos]

    def fn(*ts: torch.Tensor) -> Any:
        leaves = list(flat)
        for i, t in zip(pos, ts, strict=True):
            leaves[i] = t
        inp, args, kwargs = pytree.tree_unflatten(leaves, spec)
        return op.op(inp, *args, **kwargs)

    return fn, tensors


def _close(ref: Any, got: Any) -> str | None:
    rl, gl = pytree.tree_leaves(ref), pytree.tree_leaves(got)
    if len(rl) != len(gl):
        return f"{len(gl)} outputs, expected {len(rl)}"
    for r, g in zip(rl, gl, strict=True):
        if isinstance(r, torch.Tensor):
            g = torch.as_tensor(g)
            try:
                torch.testing.assert_close(g.to(r.dtype).reshape(r.shape), r, rtol=1e-3,
                                           atol=1e-4, equal_nan=True, check_stride=False)
            except Exception as e:  # noqa: BLE001 - any mismatch is a finding
                return str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        elif r != g and not (isinstance(r, float) and r != r and g != g):
            return f"{g!r} != {r!r}"
    return None


def run_sample(op: Any, sample: Any, interpret: bool) -> tuple[str, str, str | None] | None:
    """None on pass, else (stage, reason, op). Raises _EagerFails if eager fails."""
    from torchneuron.compiler.errors import CompileError
    from torchneuron.compiler.prepare import prepare
    from torchneuron.compiler.worker import lower_in_worker

    fn, tensors = _sample_fn(op, sample)
    try:
        ref = fn(*[t.clone() for t in tensors])
    except Exception as e:  # noqa: BLE001
        raise _EagerFails(str(e)) from e
    try:
        pg = prepare(fn, [t.clone() for t in tensors])
        text = lower_in_worker(pg.gm, timeout=120)
    except CompileError as e:
        return (e.stage, e.reason, e.op or str(e).splitlines()[0][:160])
    if not interpret:
        return None
    from torchneuron.compiler.random_ops import draw_random_inputs
    from torchneuron.compiler.stablehlo import interpret as run
    from torchneuron.compiler.stablehlo import parse_module

    try:
        module = parse_module(text)
    except Exception as e:  # noqa: BLE001
        return ("parse", type(e).__name__, None)
    ins = [t.clone() for t in tensors]
    try:
        results = run(module, [*ins, *draw_random_inputs(pg.random_inputs)])
        got = pg.assemble_outputs(ins, results)
        pg.apply_write_backs(ins, results)
    except Exception as e:  # noqa: BLE001
        return ("interpret", type(e).__name__, getattr(e, "op", None) or str(e)[:160])
    bad = _close(ref, got)
    return None if bad is None else ("compare", "mismatch", bad)


class _EagerFails(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ops", default="", help="comma-separated OpInfo names")
    ap.add_argument("--limit", type=int, default=0, help="only the first N ops")
    ap.add_argument("--samples", type=int, default=1, help="samples per op (default 1)")
    ap.add_argument("--json", default="", help="write per-op results here")
    ap.add_argument("--no-interpret", action="store_true", help="stop after lowering")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    interpret = not args.no_interpret and importlib.util.find_spec(
        "torchneuron.compiler.stablehlo") is not None
    wanted = {o for o in args.ops.split(",") if o}
    ops = [o for o in op_db if not wanted or o.name in wanted or
           f"{o.name}.{o.variant_test_name}" in wanted]
    if args.limit:
        ops = ops[: args.limit]
    results: dict[str, dict[str, Any]] = {}
    t0 = time.time()
    for op in ops:
        key = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if (why := _skip_reason(op)) is not None:
            results[key] = {"status": "skipped", "reason": why}
            continue
        if torch.float32 not in op.supported_dtypes("cpu"):
            results[key] = {"status": "skipped", "reason": "no-float32"}
            continue
        status: dict[str, Any] = {"status": "eager-fails"}
        try:
            samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))
        except Exception as e:  # noqa: BLE001
            results[key] = {"status": "skipped", "reason": f"no-samples: {e}"[:80]}
            continue
        for sample in samples[: args.samples]:
            try:
                fail = run_sample(op, sample, interpret)
            except _EagerFails:
                continue
            except Exception as e:  # noqa: BLE001 - a bug in our code is a finding too
                fail = ("internal", type(e).__name__, str(e)[:100])
            if fail is not None:
                status = {"status": "fail", "stage": fail[0], "reason": fail[1], "op": fail[2]}
                break
            status = {"status": "pass"}
        results[key] = status
        if args.verbose:
            print(f"{key}: {status}", flush=True)
    return _report(results, interpret, time.time() - t0, args.json)


def _report(results: dict[str, dict[str, Any]], interpret: bool, seconds: float, out: str) -> int:
    counts = collections.Counter(r["status"] for r in results.values())
    tested = counts["pass"] + counts["fail"]
    by_stage: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for name, r in results.items():
        if r["status"] == "fail":
            detail = f"{name}" + (f" ({r['op']})" if r.get("op") else "")
            by_stage[(r["stage"], r["reason"])].append(detail)
    for (stage, reason), names in sorted(by_stage.items(), key=lambda kv: -len(kv[1])):
        print(f"FAIL {stage}/{reason} ({len(names)}): {', '.join(sorted(names))}")
    skipped = sorted(n for n, r in results.items() if r["status"] == "skipped")
    print(f"skipped ({len(skipped)}, unspecified results / random / no float32): "
          f"{', '.join(skipped)}")
    rate = 100.0 * counts["pass"] / tested if tested else 0.0
    mode = "prepare+lower+interpret+compare" if interpret else "prepare+lower"
    print(f"\n{mode}: {counts['pass']}/{tested} ops pass ({rate:.1f}%) of ops whose eager "
          f"samples work; {counts['eager-fails']} eager-fails, {len(skipped)} skipped; "
          f"{seconds:.0f}s")
    if out:
        with open(out, "w") as f:
            json.dump({"mode": mode, "pass": counts["pass"], "tested": tested,
                       "rate": rate, "ops": results}, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
