"""Every sample of every OpInfo op through the whole compiler, compared with eager.

For each op in PyTorch's `op_db` and each dtype asked for (`--dtypes`, float32 by default;
OpInfo's CPU samples of that dtype, an op that does not support it on the CPU skipped), each
sample is run eagerly (the
reference, twice under one seed: a sample whose eager result is not reproducible, like
`empty`, is not tested; and once on the `neuron` device, every tensor there or only the
first: a sample that fails eagerly either way, like a sparse tensor, is one users cannot
run eagerly either, so it is not tested), then compiled with `compile_graph` (prepare -> Torch-MLIR in the
worker -> StableHLO -> the neuron compiler) and run as an executable (`Executable.run`,
random inputs drawn under the same seed). Results are keyed per op and dtype
(`abs@float16`); per op and dtype:

  pass        every sample that works eagerly compiles and matches eager
  refused     some sample is refused with a typed CompileError (fine: it runs eagerly);
              no sample gives different numbers
  MISMATCH    some sample compiles and gives numbers different from eager (a defect)
  RUN-ERROR   some sample compiles and then fails when run (a defect)
  LAST-BIT    (with --exact) some sample is within the tolerance below but not eager's
              bits (NaN payloads aside, signed zeros included): a defect, since the
              compiler promises eager's bits; without --exact it counts as a pass.
              (The tolerance: float32's below for every output but a half-precision
              one, which takes torch.testing's float16 / bfloat16 defaults.)
  eager-fails no sample works eagerly (on CPU and on the device); skipped: unspecified
              results (empty*), the dtype not supported on the CPU

    python tools/lowering_coverage.py [--only a,b.variant] [--shard I/N] [--samples K]
        [--json out.json] [--skip done.json ...] [--merge a.json b.json ...] [--exact]
        [--dtypes float32,float16,bfloat16,complex64] [--foreach] [-v]

The full sweep takes a long time: run it with `nice -n 10`, sharded, in the background,
then `--merge` the shards' JSON into one report. `--skip` resumes an interrupted sweep: ops
and dtypes already in the given JSON files (complete or partial shard results) are not run
again. The report prints totals per dtype. Exit status 1 when any op is a defect.
`--foreach` sweeps OpInfo's `_foreach_*` ops instead (their own lists, outside `op_db`:
the optimizers' foreach steps decompose to per-tensor ops, and no other sweep runs them).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import warnings
from typing import Any

import torch
import torch.utils._pytree as pytree

UNSPECIFIED = ("empty", "new_empty", "_refs.empty", "empty_like", "empty_strided",
               "new_empty_strided", "_refs.new_empty")
DEFECTS = ("mismatch", "run-error", "last-bit")
RTOL, ATOL = 1e-3, 1e-4
HALVES = (torch.float16, torch.bfloat16)  # their outputs: torch.testing's own tolerances
EXACT = [False]  # --exact: a last-bit difference is a defect


class _EagerFails(Exception):
    pass


class _Unreproducible(Exception):
    pass


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


def _last_bits(ref: Any, got: Any) -> str | None:
    """None when every output of ``got`` has ``ref``'s bits (NaN payloads aside), else where
    not: the compiler's own judge of a replay (``verify.compare_outputs`` with no
    tolerance)."""
    from torchneuron.compiler.verify import compare_outputs

    m = compare_outputs("sample", pytree.tree_leaves(ref),
                        [g.cpu() if isinstance(g, torch.Tensor) else g
                         for g in pytree.tree_leaves(got)], rtol=0.0, atol=0.0)
    return None if m is None else \
        f"output {m.output} at {list(m.index or [])}: {m.got!r}, eager's bits {m.expected!r}"


def _differs(ref: Any, got: Any) -> str | None:
    """None when ``got`` matches ``ref`` (fp32 tolerance, a half-precision output its
    dtype's default; NaN == NaN), else why not."""
    rl, gl = pytree.tree_leaves(ref), pytree.tree_leaves(got)
    if len(rl) != len(gl):
        return f"{len(gl)} outputs, expected {len(rl)}"
    for i, (r, g) in enumerate(zip(rl, gl, strict=True)):
        if isinstance(r, torch.Tensor):
            if not isinstance(g, torch.Tensor) or g.shape != r.shape or g.dtype != r.dtype:
                return (f"output {i}: {type(g).__name__} {getattr(g, 'dtype', '')}"
                        f"{list(getattr(g, 'shape', []))}, expected {r.dtype}{list(r.shape)}")
            rtol, atol = (None, None) if r.dtype in HALVES else (RTOL, ATOL)
            try:
                torch.testing.assert_close(g, r, rtol=rtol, atol=atol, equal_nan=True,
                                           check_stride=False)
            except AssertionError as e:
                lines = [s.strip() for s in str(e).splitlines() if s.strip()]
                return f"output {i}: " + "; ".join(lines[1:4])[:300]
        elif r != g and not (isinstance(r, float) and r != r and g != g):
            return f"output {i}: {g!r} != {r!r}"
    return None


def _describe(sample: Any) -> str:
    def d(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return f"{str(v.dtype).removeprefix('torch.')}{list(v.shape)}"
        return v

    return str(pytree.tree_map(d, (sample.input, sample.args, sample.kwargs)))[:300]


def _eager(fn: Any, tensors: list[torch.Tensor], seed: int) -> Any:
    try:
        torch.manual_seed(seed)
        ref = fn(*[t.clone() for t in tensors])
        torch.manual_seed(seed)
        again = fn(*[t.clone() for t in tensors])
    except Exception as e:  # noqa: BLE001 - the op rejects this sample eagerly
        raise _EagerFails(str(e)) from e
    if _differs(ref, again) is not None:
        raise _Unreproducible()
    _eager_on_device(fn, tensors)
    return ref


def _eager_on_device(fn: Any, tensors: list[torch.Tensor]) -> None:
    """Raise _EagerFails when users cannot run the sample eagerly on the device: neither
    with every tensor there nor with only the first (some arguments must stay on the CPU,
    as tensor_split's indices do on any accelerator)."""
    if not tensors:
        return
    error: Exception | None = None
    for moved in (len(tensors), 1):
        try:
            fn(*[t.clone().to("neuron") if i < moved else t.clone()
                 for i, t in enumerate(tensors)])
            return
        except Exception as e:  # noqa: BLE001 - eager on the device rejects this placement
            error = error or e
    raise _EagerFails(f"on the device: {error}") from error


def run_sample(op: Any, sample: Any, seed: int) -> tuple[str, str] | None:
    """None on pass, else (status, detail); raises _EagerFails / _Unreproducible."""
    import torchneuron  # noqa: F401  (the neuron device, for the eager check)
    from torchneuron.compiler import compile_graph
    from torchneuron.compiler.errors import CompileError

    fn, tensors = _sample_fn(op, sample)
    ref = _eager(fn, tensors, seed)
    try:
        exe = compile_graph(fn, [t.clone() for t in tensors], name=op.name, source="coverage")
    except CompileError as e:
        return ("refused", f"{e.stage}:{e.reason}" + (f" ({e.op})" if e.op else ""))
    ins = [t.clone() for t in tensors]
    try:
        torch.manual_seed(seed)
        flat = exe.run(ins)
        got = pytree.tree_unflatten(flat, pytree.tree_structure(ref)) \
            if len(flat) == len(pytree.tree_leaves(ref)) else flat
    except Exception as e:  # noqa: BLE001 - a compiled graph that cannot run is a defect
        return ("run-error", f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
    why = _differs(ref, got)
    if why is not None:
        return ("mismatch", why)
    why = _last_bits(ref, got) if EXACT[0] else None
    return None if why is None else ("last-bit", why)


def run_op(op: Any, max_samples: int, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The op's first ``max_samples`` (0: all) CPU samples of ``dtype``, run and judged."""
    name = op.name
    if name in UNSPECIFIED or name.startswith("empty") or name.startswith("new_empty"):
        return {"status": "skipped", "reason": "unspecified results"}
    if dtype not in op.supported_dtypes("cpu"):
        return {"status": "skipped", "reason": f"no {str(dtype).removeprefix('torch.')}"}
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
    except Exception as e:  # noqa: BLE001
        return {"status": "skipped", "reason": f"no samples: {e}"[:100]}
    if max_samples:
        samples = samples[:max_samples]
    counts: collections.Counter[str] = collections.Counter()
    first: dict[str, dict[str, Any]] = {}
    for i, sample in enumerate(samples):
        try:
            fail = run_sample(op, sample, seed=1000 + i)
        except _EagerFails as e:
            counts["eager-fails"] += 1
            first.setdefault("eager-fails", {"sample": i, "detail": str(e)[:200],
                                             "input": _describe(sample)})
            continue
        except _Unreproducible:
            counts["unreproducible"] += 1
            continue
        except Exception as e:  # noqa: BLE001 - a bug in the tool or prepare is a finding
            fail = ("run-error", f"internal {type(e).__name__}: {str(e)[:200]}")
        if fail is None:
            counts["pass"] += 1
            continue
        counts[fail[0]] += 1
        first.setdefault(fail[0], {"sample": i, "detail": fail[1], "input": _describe(sample)})
    tested = sum(counts[s] for s in ("pass", "refused", *DEFECTS))
    if tested == 0:
        status = "skipped" if counts["unreproducible"] else "eager-fails"
    elif counts["mismatch"]:
        status = "mismatch"
    elif counts["run-error"]:
        status = "run-error"
    elif counts["last-bit"]:
        status = "last-bit"
    elif counts["refused"]:
        status = "refused"
    else:
        status = "pass"
    out: dict[str, Any] = {"status": status, "samples": dict(counts), "first": first}
    if status == "skipped":
        out["reason"] = "eager results not reproducible"
    return out


def _select(ops: list[Any], only: str, shard: str) -> list[Any]:
    wanted = {o for o in only.split(",") if o}
    picked = [o for o in ops if not wanted or o.name in wanted
              or f"{o.name}.{o.variant_test_name}" in wanted]
    if shard:
        i, n = (int(v) for v in shard.split("/"))
        picked = picked[i::n]
    return picked


def dtype_of(key: str) -> str:
    """``abs@float16`` -> ``float16``."""
    return key.rpartition("@")[2]


def _totals(results: dict[str, dict[str, Any]], seconds: float, label: str) -> dict[str, Any]:
    """Print one totals line of ``results`` and return it as data."""
    counts = collections.Counter(r["status"] for r in results.values())
    tested = sum(counts[s] for s in ("pass", "refused", *DEFECTS))
    rate = 100.0 * counts["pass"] / tested if tested else 0.0
    n_samples = sum(sum(r.get("samples", {}).values()) for r in results.values())
    print(f"{label} ({n_samples} samples): {counts['pass']}/{tested} ops "
          f"pass ({rate:.1f}%) of ops with a sample that works eagerly (CPU and device); "
          f"{counts['refused']} refused, {counts['mismatch']} MISMATCH, "
          f"{counts['run-error']} RUN-ERROR, {counts['last-bit']} LAST-BIT; "
          f"{counts['eager-fails']} eager-fails, {counts['skipped']} skipped; "
          f"{seconds:.0f}s")
    return {"pass": counts["pass"], "tested": tested, "rate": rate, "counts": dict(counts),
            "samples": n_samples, "seconds": round(seconds, 1)}


def report(results: dict[str, dict[str, Any]], seconds: float) -> dict[str, Any]:
    """Print the defects, refusals and skips of ``results`` (keyed ``op@dtype``) and the
    totals per dtype and overall; return the totals and the results."""
    for status in (*DEFECTS, "refused"):
        names = sorted(n for n, r in results.items() if r["status"] == status)
        if not names:
            continue
        print(f"\n{status.upper()} ({len(names)}):")
        for n in names:
            f = results[n]["first"][status]
            s = results[n]["samples"]
            print(f"  {n}: {s.get(status, 0)}/{s.get('pass', 0) + s.get(status, 0)}+ samples; "
                  f"first #{f['sample']}: {f['detail']}"
                  + (f"  input={f['input']}" if status in DEFECTS else ""))
    fails = sorted(n for n, r in results.items() if r["status"] == "eager-fails")
    if fails:
        print(f"\nEAGER-FAILS ({len(fails)}), not counted:")
        for n in fails:
            f = results[n].get("first", {}).get("eager-fails", {})
            print(f"  {n}: first #{f.get('sample', '?')}: {f.get('detail', '')[:120]}")
    skipped = sorted(n for n, r in results.items() if r["status"] == "skipped")
    print(f"\nskipped ({len(skipped)}): {', '.join(skipped)}\n")
    per_dtype = {}
    for dtype in sorted({dtype_of(k) for k in results}):
        part = {k: r for k, r in results.items() if dtype_of(k) == dtype}
        per_dtype[dtype] = _totals(part, sum(r.get("seconds", 0.0) for r in part.values()),
                                   f"{dtype}, whole compiler")
    summary = _totals(results, seconds, "all dtypes, whole compiler")
    return {**summary, "dtypes": per_dtype, "ops": results}


def write_json(path: str, data: dict[str, Any], final: bool = False) -> None:
    """Results so far (``final=False``: rewritten after every op, so partial results
    survive an interrupted sweep) or the summary (indented, keys sorted)."""
    with open(path, "w") as f:
        if final:
            json.dump(data, f, indent=1, sort_keys=True)
        else:
            json.dump(data, f)


def read_shards(paths: list[str], combine: Any = max) -> tuple[dict[str, dict[str, Any]], float]:
    """The per-op results of shard JSON files, and their seconds combined (``max``: shards
    that ran side by side; ``sum``: one after another)."""
    results: dict[str, dict[str, Any]] = {}
    seconds = 0.0
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        results.update(data["ops"])
        seconds = combine(seconds, data["seconds"])
    return results, seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", "--ops", default="", help="comma-separated OpInfo names")
    ap.add_argument("--shard", default="", help="I/N: every N-th op starting at I")
    ap.add_argument("--samples", type=int, default=0, help="samples per op (default: all)")
    ap.add_argument("--json", default="", help="write per-op results here")
    ap.add_argument("--skip", nargs="+", default=[], help="skip ops already in these JSON files")
    ap.add_argument("--merge", nargs="+", default=[], help="merge shard JSON files and report")
    ap.add_argument("--exact", action="store_true",
                    help="a float output within tolerance but not eager's bits is a defect")
    ap.add_argument("--dtypes", default="float32",
                    help="comma-separated dtypes to sample, e.g. float32,float16,bfloat16,complex64")
    ap.add_argument("--foreach", action="store_true",
                    help="OpInfo's _foreach_* ops (foreach_*_op_db) instead of op_db")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    EXACT[0] = args.exact
    if args.merge:
        results, seconds = read_shards(args.merge, max)
        summary = report(results, seconds)
    else:
        warnings.filterwarnings("ignore")
        os.environ.setdefault("TORCHNEURON_COMPILE_TIMEOUT", "600")
        import torch.testing._internal.common_methods_invocations as cmi

        # OpInfo wraps random ops in wrapper_set_seed (reseeds inside the op, which a
        # compiled graph refuses); the sweep seeds eager and compiled runs itself.
        cmi.wrapper_set_seed = lambda op, *a, **k: op(*a, **k)
        done: set[str] = set()
        for path in args.skip:
            with open(path) as f:
                done.update(json.load(f)["ops"])
        results = {}
        t0 = time.time()
        dtypes = [getattr(torch, d) for d in args.dtypes.split(",") if d]
        db = cmi.op_db if not args.foreach else [
            *cmi.foreach_unary_op_db, *cmi.foreach_binary_op_db, *cmi.foreach_pointwise_op_db,
            *cmi.foreach_reduce_op_db, *cmi.foreach_other_op_db]
        for op, dtype in ((o, d) for d in dtypes for o in _select(db, args.only, args.shard)):
            key = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "") \
                + f"@{str(dtype).removeprefix('torch.')}"
            if key in done:
                continue
            t_op = time.time()
            results[key] = run_op(op, args.samples, dtype)
            results[key]["seconds"] = round(time.time() - t_op, 2)
            if args.verbose:
                print(f"{key}: {results[key]['status']} {results[key]['seconds']}s "
                      f"{results[key].get('samples', '')} {results[key].get('first', '')}",
                      flush=True)
            if args.json:
                write_json(args.json, {"seconds": time.time() - t0, "ops": results})
        summary = report(results, time.time() - t0)
    if args.json:
        write_json(args.json, summary, final=True)
    return 1 if any(summary["counts"].get(s) for s in DEFECTS) else 0


if __name__ == "__main__":
    sys.exit(main())
