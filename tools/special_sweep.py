"""OpInfo samples with special values, ``torch.compile(backend="neuron")`` against eager CPU.

Why: OpInfo's samples are random finite numbers, so the coverage sweep
(``tools/lowering_coverage.py``) never shows what a lowering does at NaN, +-inf, -0.0,
subnormals, the dtype's maximum, 1e30 or halfway values, which is where a decomposition's
arithmetic departs from ATen's kernel. This sweep takes each op's OpInfo samples in float32,
float64, float16, bfloat16 and int64, plus copies of every float sample with special values
written into every other (or every third, fifth, ...) element of each float tensor, and runs
each one as a user would: ``torch.compile(lambda *a: op(*a), backend="neuron")`` on
``neuron`` tensors, against the op on CPU tensors.

Comparison: every output of every op, elementwise or not, must have eager's bits (the
sign of zeros included, NaN payloads aside), judged by the compiler's own check
(``torchneuron.compiler.verify.compare_outputs`` with no tolerance, as adaptive eager
judges a replay): the project promises eager's bits, and where they come from a library
kernel the program calls that kernel or refuses. ``--tolerance`` (opt-in, for looking at
an old lowering) lets a non-elementwise op's float outputs within the dtype's
``assert_close`` tolerance pass. A graph the compiler refuses runs eagerly (counted by
``torchneuron.compiler.stats()``), which is fine: the sample then counts as refused.

Severity of a mismatch, worst first: ``nan`` (NaN positions differ), ``inf``, ``int``,
``value`` (beyond the dtype's tolerance), ``meta`` (shape or dtype), ``error`` (compiled
raised where eager did not), ``overflow`` (a reduction or matmul on the ``big`` variant
whose +-max and 1e30 overflow or cancel elsewhere than eager's: its summation order is not
eager's), ``zero-sign``, ``ulp`` (within the tolerance, not eager's bits). Each is a
mismatch.

    python tools/special_sweep.py [--only a,b] [--elementwise] [--shard I/N] [--samples K]
        [--dtypes float32,...] [--variants plain,nan,...] [--json out.json]
        [--merge a.json ...] [--all] [--tolerance] [-v]

``--elementwise`` keeps only OpInfo's elementwise and reduction ops (its ``UnaryUfuncInfo``,
``BinaryUfuncInfo`` and ``ReductionOpInfo`` entries, and ``ELEMENTWISE`` below), the
scope of issue 22's sweep over every such op.

Families covered elsewhere (tests/compiler/test_special_values*.py, test_max_min_dim.py,
test_fmod_remainder.py, test_pool_nan.py, and the exact-ops helper's pow / relu / clamp /
casts / sort ties / round / sign / copysign / nan_to_num) are skipped unless ``--all``. Run it under
``nice``, sharded, with ``TORCHNEURON_CACHE=0``. Exit status 1 when any op mismatches.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time
import warnings
from typing import Any

import torch
import torch.utils._pytree as pytree
from lowering_coverage import (
    UNSPECIFIED,
    _describe,
    _sample_fn,
    _select,
    read_shards,
    write_json,
)
from opinfo_device import _time_limit, op_id

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "int64": torch.int64}
NAN, INF = float("nan"), float("inf")
# name -> (values, stride): every stride-th element of each float tensor gets the next value
VARIANTS: dict[str, tuple[tuple[Any, ...], int]] = {
    "plain": ((), 0),
    "nan": ((NAN,), 5),
    "inf": ((INF, -INF), 3),
    "zero": ((0.0, -0.0, "sub", "-sub"), 2),
    "big": (("max", "-max", 1e30, -1e30), 3),
    "round": ((0.5, 2.5, -0.5, -1.5, 1.5, -2.5), 2),
    "int": (("imax", "imin", 0, -1), 3),
}
HALF_VARIANTS = ("plain", "nan", "inf", "big")
SEVERITY = ("nan", "inf", "int", "value", "meta", "error", "overflow", "zero-sign", "ulp")
# elementwise besides OpInfo's ufunc classes: exact bits expected
ELEMENTWISE = {"where", "masked_fill", "lerp", "addcmul", "addcdiv", "nn.functional.hardswish",
               "nn.functional.hardsigmoid", "nn.functional.silu", "nn.functional.mish",
               "nn.functional.softplus", "nn.functional.logsigmoid", "xlogy", "special.xlog1py",
               "nn.functional.hardshrink", "nn.functional.softshrink", "nn.functional.tanhshrink",
               "nn.functional.leaky_relu", "nn.functional.prelu", "nn.functional.relu6"}
# covered by existing special-value tests or left to the exact-ops helper (--all keeps them)
COVERED = {
    "pow", "float_power", "__rpow__", "relu", "nn.functional.relu", "nn.functional.threshold",
    "nn.functional.hardtanh", "nn.functional.relu6", "clamp", "clamp_min", "clamp_max", "clip",
    "topk", "sort", "argsort", "msort", "kthvalue", "max", "min", "amax", "amin", "aminmax",
    "median", "nanmedian", "mode", "argmax", "argmin", "round", "sign", "sgn", "copysign",
    "nan_to_num", "cummax", "cummin", "floor_divide", "fmod", "remainder", "__rmod__",
    "__rfloordiv__", "isfinite", "isnan", "isinf", "nn.functional.gelu", "nn.functional.elu",
    "nn.functional.selu", "nn.functional.celu", "histc", "trunc", "fix", "byte", "char",
    "short", "int", "long", "nn.functional.max_pool1d", "nn.functional.max_pool2d",
    "nn.functional.max_pool3d", "nn.functional.adaptive_max_pool1d",
    "nn.functional.adaptive_max_pool2d", "nn.functional.adaptive_max_pool3d", "maximum",
    "minimum", "fmax", "fmin",
}
COVERED_VARIANTS = {"div.floor_rounding", "div.trunc_rounding"}
TOLERANCE = False  # (--tolerance) non-elementwise float outputs within assert_close's pass


def _value(v: Any, dtype: torch.dtype) -> float:
    if isinstance(v, float) or isinstance(v, int):
        return v
    if v in ("imax", "imin"):
        info = torch.iinfo(dtype)
        return info.max if v == "imax" else info.min
    fi = torch.finfo(dtype)
    return {"sub": fi.smallest_normal / 4, "-sub": -fi.smallest_normal / 4,
            "max": fi.max, "-max": -fi.max}[v]


def inject(t: torch.Tensor, variant: str, k: int) -> torch.Tensor:
    """``t`` with the variant's values in every stride-th element (offset by the tensor's
    position ``k`` among the sample's tensors, so two operands do not align)."""
    values, stride = VARIANTS[variant]
    want_int = variant == "int"
    if not values or t.numel() == 0 or t.is_complex() or t.dtype == torch.bool \
            or t.is_floating_point() == want_int:
        return t
    flat = t.detach().clone().reshape(-1)
    for n, j in enumerate(range(k % stride, flat.numel(), stride)):
        flat[j] = _value(values[(n + k) % len(values)], t.dtype)
    return flat.reshape(t.shape).requires_grad_(t.requires_grad)


def _tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) of ``torch.testing.assert_close`` for ``dtype``: used only to name how
    far off a value is (``value`` beyond it, ``ulp`` within), and by ``tolerance=True``."""
    return {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5),
            torch.float32: (1.3e-6, 1e-5), torch.complex64: (1.3e-6, 1e-5)}.get(
        dtype, (1e-7, 1e-7))


def _at(shape: torch.Size, index: tuple[int, ...] | None) -> str:
    """``[i]``: the flat index of ``index`` in ``shape`` (``_repro`` reads it back)."""
    flat = 0
    for i, n in zip(index or (), shape, strict=False):
        flat = flat * n + i
    return f"[{flat}]"


def compare(want: Any, got: Any, tolerance: bool = False) -> tuple[str, str] | None:
    """None when ``got`` has ``want``'s bits; else (severity, detail).

    The judge is the compiler's own (``verify.compare_outputs`` with no tolerance: eager's
    bits, a zero's sign included, NaN payloads aside), as adaptive eager's check of a
    replay. The severity names how far off the first differing output is: ``nan``,
    ``inf`` or ``value`` beyond the dtype's ``assert_close`` tolerance, ``zero-sign`` or
    ``ulp`` within it; ``meta`` for a shape or dtype, ``int`` for an integer or bool.
    ``tolerance=True`` (opt-in) lets a float output within that tolerance pass."""
    from torchneuron.compiler.verify import compare_outputs

    wl = pytree.tree_leaves(want)
    gl = [g.detach().cpu() if isinstance(g, torch.Tensor) else g
          for g in pytree.tree_leaves(got)]
    m = compare_outputs("sample", wl, gl, rtol=0.0, atol=0.0)
    if m is None:
        return None
    n = m.output
    w = wl[n] if n < len(wl) and len(wl) == len(gl) else None
    if w is None or not isinstance(w, torch.Tensor):
        return ("meta" if w is None else "value"), f"out{n}: {m.got!r} != {m.expected!r}"
    if m.index is None:
        return "meta", f"out{n}: {m.got} expected {m.expected}"
    if not (w.is_floating_point() or w.is_complex()):
        return "int", f"out{n}: {_at(w.shape, m.index)} got {m.got!r} want {m.expected!r}"
    rtol, atol = _tolerance(w.dtype)
    far = compare_outputs("sample", [w], [gl[n]], rtol=rtol, atol=atol)
    if far is None and tolerance:
        return None
    at = m if far is None else far
    where = f"out{n}: {_at(w.shape, at.index)} got {at.got!r} want {at.expected!r}"
    pair = [complex(at.got), complex(at.expected)]
    if far is not None:
        if any(v != v for v in pair):
            return "nan", where
        if any(abs(v) == float("inf") for v in pair):
            return "inf", where
        return "value", where
    return ("zero-sign" if pair[0] == pair[1] == 0 else "ulp"), where


def _is_elementwise(op: Any) -> bool:
    from torch.testing._internal.opinfo.core import BinaryUfuncInfo, UnaryUfuncInfo

    return isinstance(op, (UnaryUfuncInfo, BinaryUfuncInfo)) or op.name in ELEMENTWISE


def is_elementwise_or_reduction(op: Any) -> bool:
    """The ``--elementwise`` selection: OpInfo's ufunc and reduction classes."""
    from torch.testing._internal.opinfo.core import ReductionOpInfo

    return _is_elementwise(op) or isinstance(op, ReductionOpInfo)


def _compiled(fn: Any, tensors: list[torch.Tensor]) -> tuple[Any, int, int]:
    """(outputs on CPU, compilations, failures) of one fresh ``torch.compile`` call."""
    import torchneuron

    torch._dynamo.reset()
    before = torchneuron.compiler.stats()
    out = torch.compile(lambda *a: fn(*a), backend="neuron")(
        *[t.clone().to("neuron") for t in tensors])
    after = torchneuron.compiler.stats()
    out = pytree.tree_map(lambda v: v.cpu() if isinstance(v, torch.Tensor) else v, out)
    return (out, after["compilations"] - before["compilations"],
            after["failures"] - before["failures"])


def run_case(op: Any, sample: Any, variant: str, timeout: int) -> tuple[str, str]:
    """(outcome, detail) of one sample in one variant: outcome is pass, refused, eager
    (Dynamo compiled nothing), skip (eager fails, or not reproducible), or a severity."""
    if isinstance(sample, _Sample):
        fn, tensors = sample.fn, sample.tensors
    else:
        fn, tensors = _sample_fn(op, sample)
    tensors = [inject(t, variant, k) for k, t in enumerate(tensors)]
    try:
        torch.manual_seed(0)
        want = fn(*[t.clone() for t in tensors])
        torch.manual_seed(0)
        again = fn(*[t.clone() for t in tensors])
    except Exception as e:  # noqa: BLE001 - eager rejects the sample: nothing to compare
        return "skip", f"eager: {type(e).__name__}"
    if compare(want, again) is not None:
        return "skip", "eager not reproducible"
    try:
        with _time_limit(timeout):
            torch.manual_seed(0)
            got, compiled, refused = _compiled(fn, tensors)
    except Exception as e:  # noqa: BLE001
        try:  # a placement eager on the device rejects too is not the compiler's
            fn(*[t.clone().to("neuron") for t in tensors])
        except Exception:  # noqa: BLE001
            return "skip", "eager on the device fails"
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    why = compare(want, got, tolerance=TOLERANCE and not _is_elementwise(op))
    if why is not None:
        return why
    if refused and not compiled:
        return "refused", ""
    return ("pass", "") if compiled else ("eager", "")


def _literal(tensors: list[torch.Tensor]) -> str:
    return ", ".join(f"torch.tensor({t.tolist()}, dtype={t.dtype})" for t in tensors)


def _repro(op: Any, sample: Any, variant: str, detail: str, timeout: int) -> str:
    """The sample's inputs when small; for elementwise ops, the one element that differs
    (checked to mismatch on its own), else the sample's shapes and arguments."""
    fn, tensors = _sample_fn(op, sample)
    tensors = [inject(t, variant, k) for k, t in enumerate(tensors)]
    at = re.search(r"\[(\d+)\]", detail)
    if _is_elementwise(op) and at and tensors:
        i = int(at.group(1))
        shape = torch.broadcast_shapes(*[t.shape for t in tensors])
        mini = [t.expand(shape).reshape(-1)[i:i + 1].clone() for t in tensors]
        try:
            small = _Sample(fn, mini)
            outcome, _ = run_case(op, small, variant="plain", timeout=timeout)
        except Exception:  # noqa: BLE001 - the shrunk call is not valid: keep the whole
            outcome = "pass"
        if outcome in SEVERITY:
            return f"{op.name}({_literal(mini)}) {_describe(sample)}"[:400]
    if sum(t.numel() for t in tensors) <= 24:
        return f"{op.name}({_literal(tensors)}) {_describe(sample)}"[:400]
    return _describe(sample)


class _Sample:
    """A sample already flattened to (fn, tensors), for ``run_case``."""

    def __init__(self, fn: Any, tensors: list[torch.Tensor]) -> None:
        self.fn, self.tensors = fn, tensors


def _spread(samples: list[Any], k: int) -> list[Any]:
    """``k`` samples spread over the list, first and last included (OpInfo puts the
    unusual arguments, like ``add``'s alpha, last)."""
    n = len(samples)
    if k <= 0 or n <= k:
        return samples
    if k == 1:
        return samples[:1]
    return [samples[i] for i in sorted({round(j * (n - 1) / (k - 1)) for j in range(k)})]


def run_op(op: Any, dtypes: list[str], variants: list[str], max_samples: int,
           timeout: int) -> dict[str, Any]:
    counts: collections.Counter[str] = collections.Counter()
    found: dict[str, dict[str, Any]] = {}
    supported = op.supported_dtypes("cpu")
    for dname in dtypes:
        dtype = DTYPES[dname]
        if dtype not in supported:
            continue
        try:
            samples = _spread(list(op.sample_inputs("cpu", dtype, requires_grad=False)),
                              max_samples)
        except Exception:  # noqa: BLE001
            continue
        if dtype.is_floating_point:
            names = [v for v in variants if v != "int"
                     and (dtype in (torch.float32, torch.float64) or v in HALF_VARIANTS)]
        else:
            names = [v for v in variants if v in ("plain", "int")]
        for i, sample in enumerate(samples):
            for variant in names:
                try:
                    outcome, detail = run_case(op, sample, variant, timeout)
                except Exception as e:  # noqa: BLE001 - the tool's own failure is a finding
                    outcome, detail = "error", f"internal {type(e).__name__}: {e}"[:200]
                if variant == "big" and outcome in ("nan", "inf", "value") \
                        and not _is_elementwise(op):
                    outcome = "overflow"
                counts[outcome] += 1
                if outcome in SEVERITY:
                    key = f"{dname}/{variant}"
                    found.setdefault(key, {"severity": outcome, "detail": detail, "sample": i,
                                           "repro": _repro(op, sample, variant, detail, timeout)})
    worst = min((f["severity"] for f in found.values()), key=SEVERITY.index, default=None)
    return {"status": worst or ("pass" if counts["pass"] else "untested"),
            "counts": dict(counts), "mismatches": found, "elementwise": _is_elementwise(op)}


def _reclassify(results: dict[str, dict[str, Any]]) -> None:
    """Results written before 'overflow' existed: a non-elementwise op's nan / inf / value
    on the big variant becomes 'overflow' (as ``run_op`` now files it)."""
    old = [n for n, r in results.items() if "elementwise" not in r and r.get("mismatches")]
    if not old:
        return
    import torch.testing._internal.common_methods_invocations as cmi

    by_id = {op_id(op): op for op in cmi.op_db}
    for n in old:
        r = results[n]
        r["elementwise"] = n in by_id and _is_elementwise(by_id[n])
        for key, m in r["mismatches"].items():
            if key.endswith("/big") and m["severity"] in ("nan", "inf", "value") \
                    and not r["elementwise"]:
                m["severity"] = "overflow"
        r["status"] = min((m["severity"] for m in r["mismatches"].values()),
                          key=SEVERITY.index)


def report(results: dict[str, dict[str, Any]], seconds: float) -> dict[str, Any]:
    bad = sorted((n for n, r in results.items() if r["status"] in SEVERITY),
                 key=lambda n: (SEVERITY.index(results[n]["status"]), n))
    print(f"\n{'op':34} {'worst':9} {'cases (dtype/variant: severity)':50}")
    for n in bad:
        r = results[n]
        cases = ", ".join(f"{k}:{v['severity']}" for k, v in sorted(r["mismatches"].items()))
        print(f"{n:34} {r['status']:9} {cases}")
    print("\nfirst mismatch per op, with a repro (sample index, inputs):")
    for n in bad:
        key, first = min(results[n]["mismatches"].items(),
                         key=lambda kv: SEVERITY.index(kv[1]["severity"]))
        print(f"  {n} [{key} #{first['sample']}] {first['severity']}: {first['detail']}\n"
              f"      repro: {first['repro']}")
    totals: collections.Counter[str] = collections.Counter()
    for r in results.values():
        totals.update(r["counts"])
    status = collections.Counter(r["status"] for r in results.values())
    print(f"\n{len(results)} ops, {sum(totals.values())} cases {dict(totals)}; "
          f"{len(bad)} ops mismatch {dict((s, status[s]) for s in SEVERITY if status[s])}; "
          f"{seconds:.0f}s")
    return {"ops": results, "seconds": seconds, "mismatching": bad}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", "--ops", default="", help="comma-separated OpInfo names")
    ap.add_argument("--elementwise", action="store_true",
                    help="only elementwise and reduction ops (ufunc and reduction OpInfos)")
    ap.add_argument("--shard", default="", help="I/N: every N-th op starting at I")
    ap.add_argument("--samples", type=int, default=3,
                    help="samples per op and dtype, spread over OpInfo's list (0: all)")
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--timeout", type=int, default=120, help="seconds per case")
    ap.add_argument("--all", action="store_true", help="keep the families covered elsewhere")
    ap.add_argument("--json", default="")
    ap.add_argument("--merge", nargs="+", default=[])
    ap.add_argument("--tolerance", action="store_true", help="a non-elementwise op's float "
                    "outputs within the dtype's assert_close tolerance pass (default: "
                    "eager's bits)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    global TOLERANCE
    TOLERANCE = args.tolerance
    if args.merge:
        results, seconds = read_shards(args.merge, lambda a, b: a + b)
        _reclassify(results)
        summary = report(results, seconds)
    else:
        warnings.filterwarnings("ignore")
        os.environ.setdefault("TORCHNEURON_COMPILE_TIMEOUT", "600")
        import torch.testing._internal.common_methods_invocations as cmi

        import torchneuron  # noqa: F401  (the neuron device and backend)

        cmi.wrapper_set_seed = lambda op, *a, **k: op(*a, **k)  # see lowering_coverage
        dtypes, variants = args.dtypes.split(","), args.variants.split(",")
        results = {}
        t0 = time.time()
        ops = cmi.op_db
        if args.elementwise:
            ops = [op for op in ops if is_elementwise_or_reduction(op)]
        for op in _select(ops, args.only, args.shard):
            key = op_id(op)
            if op.name in UNSPECIFIED or op.name.startswith(("empty", "new_empty")) \
                    or op.has_nondeterministic_output:
                continue
            if not args.all and (op.name in COVERED or key in COVERED_VARIANTS):
                continue
            t_op = time.time()
            results[key] = run_op(op, dtypes, variants, args.samples, args.timeout)
            results[key]["seconds"] = round(time.time() - t_op, 1)
            if args.verbose:
                r = results[key]
                print(f"{key}: {r['status']} {r['seconds']}s {r['counts']}", flush=True)
                for k, m in r["mismatches"].items():
                    print(f"    {k}: {m['severity']} {m['detail']}", flush=True)
            if args.json:
                write_json(args.json, {"seconds": time.time() - t0, "ops": results})
        summary = report(results, time.time() - t0)
    if args.json:
        write_json(args.json, summary, final=True)
    return 1 if summary["mismatching"] else 0


if __name__ == "__main__":
    sys.exit(main())
