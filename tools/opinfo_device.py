"""OpInfo sweep: every float32 sample of every OpInfo op, neuron against CPU.

Why: PyTorch's own OpInfo database is the widest catalogue of op calls that exists
(views, indices, scalars, lists, non-tensor returns, in-place variants). Running
each sample on CPU and on ``neuron`` and comparing is the acceptance bar of the
device (DESIGN.md section 9): the device must be indistinguishable from CPU.

For each op (function variant, plus its in-place variant when it has one) and
each sample: the sample's tensors are copied once for the CPU reference and once
to ``neuron`` (nested lists and kwargs included, shared tensors stay shared), the
op runs on both, and outputs *and* the (possibly mutated) inputs are compared
with ``torch.testing.assert_close``. Outputs that are views must also report the
CPU view's sizes, strides and storage offset. For ``supports_autograd`` ops the
input gradients of ``sum(out * cotangent)`` (cotangent from a seeded generator)
are compared too.

Samples that raise on CPU are not held against the device (the op is left out of
the denominator when none runs on CPU). Ops whose results are unspecified
(uninitialized memory, random numbers) are skipped and listed with the reason.

Usage::

    python tools/opinfo_device.py [--ops add,mm] [--limit N] [--json out.json] [--no-grad]
        [--exact]

With ``--exact`` results are compared bit for bit (NaN payloads aside, signed zeros
included): the device runs CPU eager's kernels, so a difference is a different
computation, like ATen's ``matmul`` composite, which decomposed a product with a batch of
one otherwise for a tensor subclass (a neuron tensor) than for a CPU tensor.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import struct
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

__all__ = [
    "OpResult",
    "check_op",
    "find_ops",
    "op_id",
    "unspecified_reason",
    "main",
]

DTYPE = torch.float32
PER_OP_TIMEOUT_S = 180

# Ops whose values are unspecified: comparing two runs of them is meaningless.
_UNINITIALIZED = {
    "empty": "returns uninitialized memory",
    "empty_like": "returns uninitialized memory",
    "empty_strided": "returns uninitialized memory",
    "empty_permuted": "returns uninitialized memory",
    "new_empty": "returns uninitialized memory",
    "new_empty_strided": "returns uninitialized memory",
}


# ops whose CPU bits are not reproducible (``--exact`` only: within tolerances they are):
# LAPACK's ``gelsy``, the CPU's default ``lstsq`` driver, gave 2 different solutions in 20
# calls on one 3x3 system here, as the buffers' alignment changed
_CPU_NOT_REPRODUCIBLE = {"linalg.lstsq": "the CPU's gelsy driver is not bit-reproducible"}


def op_id(op: Any) -> str:
    """The OpInfo's unique name, ``name.variant`` (as PyTorch's test ids spell it)."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def unspecified_reason(op: Any) -> str | None:
    """Why ``op``'s results are unspecified (statically known), or None."""
    if op.name in _UNINITIALIZED:
        return _UNINITIALIZED[op.name]
    if op.has_nondeterministic_output:
        return "OpInfo marks its output nondeterministic"
    if _exact and op.name in _CPU_NOT_REPRODUCIBLE:
        return _CPU_NOT_REPRODUCIBLE[op.name]
    return None


class _RandomOpSpy(TorchDispatchMode):
    """Notes aten ops tagged ``nondeterministic_seeded`` (the op draws random numbers)."""

    def __init__(self) -> None:
        super().__init__()
        self.random: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.random.add(str(func))
        return func(*args, **(kwargs or {}))


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    """Abort a runaway op (SIGALRM, main thread only) so one op cannot stall the sweep."""
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise _Timeout(f"op took more than {seconds}s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class OpResult:
    """The verdict for one OpInfo op."""

    op: str
    status: str  # pass | fail | crash | skipped | cpu-only-errors | no-samples | no-float32
    samples: int = 0
    grad_status: str = "n/a"  # "pass" | "fail" | "n/a"
    grad_samples: int = 0
    error: str = ""
    grad_error: str = ""
    reason: str = ""
    seconds: float = 0.0
    details: list[str] = field(default_factory=list)


def _first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(e).__name__


class _Copier:
    """Copies a sample's tensors, each distinct tensor once (aliases stay aliases).

    Samples are generated on ``neuron`` (as PyTorch's device-generic tests do, so
    sample functions keep on CPU what must stay there, e.g. ``tensor_split``'s
    indices). ``to_cpu`` makes the CPU reference: neuron tensors, devices and
    device strings map to CPU. Otherwise tensors are cloned where they are.
    """

    def __init__(self, to_cpu: bool, requires_grad: bool) -> None:
        self.to_cpu = to_cpu
        self.requires_grad = requires_grad
        self.memo: dict[int, torch.Tensor] = {}
        self.saw_neuron = False  # did the sample put anything on the device?
        self.saw_cpu_device = False  # does it explicitly ask for CPU results?

    def __call__(self, x: Any) -> Any:
        if isinstance(x, (torch.device, str)) and str(x).startswith("neuron"):
            self.saw_neuron = True
            return torch.device("cpu") if self.to_cpu else x
        if isinstance(x, (torch.device, str)) and str(x).startswith("cpu"):
            self.saw_cpu_device = True
        if not isinstance(x, torch.Tensor):
            return x
        got = self.memo.get(id(x))
        if got is not None:
            return got
        src = x.detach()
        if src.device.type == "neuron":
            self.saw_neuron = True
        y = src.cpu() if self.to_cpu and src.device.type == "neuron" else src.clone()
        if self.requires_grad and x.requires_grad:
            y.requires_grad_(True)
        self.memo[id(x)] = y
        return y

    def copy(self, tree: Any) -> Any:
        return tree_map(self, tree)


def _to_cpu(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.device.type != "cpu":
        return x.detach().cpu()
    if isinstance(x, torch.Tensor):
        return x.detach()
    return x


# ``--exact``: results compared bit for bit (NaN payloads aside, signed zeros included),
# not within torch.testing's tolerances: the device computes with CPU eager's kernels, so
# any difference is a different computation (a composite that decomposed otherwise)
_exact = False


def _bits_differ(a: torch.Tensor, e: torch.Tensor) -> str | None:
    """Where ``a`` and ``e`` (CPU, strided) differ in their bits, or None."""
    if (a.dtype, a.shape) != (e.dtype, e.shape):
        return f"{a.dtype}{list(a.shape)} against CPU's {e.dtype}{list(e.shape)}"
    if e.is_complex():
        a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
    if e.is_floating_point():
        same = ((a == e) & (a.signbit() == e.signbit())) | (a.isnan() & e.isnan())
    else:
        same = a == e
    if bool(same.all()):
        return None
    at = tuple((~same).nonzero()[0].tolist())
    return (f"{int((~same).sum())} of {same.numel()} elements differ in their bits, first "
            f"at {list(at)}: {a[at].item()!r}, CPU {e[at].item()!r}")


def _assert_same(a: Any, e: Any, where: str) -> None:
    if _exact and isinstance(e, torch.Tensor) and e.layout == torch.strided \
            and not e.is_quantized:
        why = _bits_differ(a, e)
        if why is not None:
            raise AssertionError(f"{where}: {why}")
        return
    if _exact and isinstance(e, float) and isinstance(a, float):
        if struct.pack("<d", a) != struct.pack("<d", e) and not (a != a and e != e):
            raise AssertionError(f"{where}: {a!r}, CPU {e!r}")
        return
    torch.testing.assert_close(a, e, equal_nan=True, msg=lambda m: f"{where}: {m}")


def _compare(actual: Any, expected: Any, what: str, on_neuron: bool = True) -> None:
    """Assert neuron results equal CPU results (values, dtypes, shapes; view metadata)."""
    a_flat, _ = tree_flatten(actual)
    e_flat, _ = tree_flatten(expected)
    if len(a_flat) != len(e_flat):
        raise AssertionError(f"{what}: {len(a_flat)} results on neuron, {len(e_flat)} on CPU")
    for i, (a, e) in enumerate(zip(a_flat, e_flat, strict=True)):
        where = f"{what}[{i}]"
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"{where}: neuron gave {type(a).__name__}, CPU a tensor")
            if on_neuron and e.device.type == "cpu" and a.device.type != "neuron":
                raise AssertionError(f"{where}: result on {a.device}, expected neuron")
            if e._is_view() and a.layout == torch.strided:
                if (a.shape, a.stride(), a.storage_offset()) != (
                    e.shape, e.stride(), e.storage_offset()
                ):
                    raise AssertionError(
                        f"{where}: view metadata {tuple(a.shape)}/{a.stride()}/"
                        f"{a.storage_offset()} != CPU {tuple(e.shape)}/{e.stride()}/"
                        f"{e.storage_offset()}"
                    )
            _assert_same(_to_cpu(a), _to_cpu(e), where)
        elif isinstance(e, (int, float, bool, complex)):
            _assert_same(a, e, where)
        elif a != e and not (e is None and a is None):
            raise AssertionError(f"{where}: neuron gave {a!r}, CPU {e!r}")


def _differentiable(ts: list[Any]) -> list[torch.Tensor]:
    return [
        t for t in ts
        if isinstance(t, torch.Tensor) and t.requires_grad and t.dtype.is_floating_point
    ]  # fmt: skip


def _grads(
    out: Any, inputs: list[torch.Tensor], cotangents: list[torch.Tensor]
) -> tuple[Any, ...]:
    outs = _differentiable(tree_flatten(out)[0])
    return torch.autograd.grad(outs, inputs, cotangents, allow_unused=True)


@dataclass
class _Run:
    out: Any = None
    inputs: Any = None
    error: BaseException | None = None


def _run(
    fn: Callable, sample: Any, copier: _Copier, mode: TorchDispatchMode | None = None
) -> _Run:
    inp = copier.copy(sample.input)
    args = copier.copy(sample.args)
    kwargs = copier.copy(sample.kwargs)
    r = _Run(inputs=(inp, args, kwargs))
    torch.manual_seed(0)
    try:
        with mode if mode is not None else contextlib.nullcontext():
            r.out = fn(inp, *args, **kwargs)
    except Exception as e:  # noqa: BLE001 - a sample's error is a result, not a crash
        r.error = e
    return r


def _reproducible(fn: Callable, sample: Any, first: _Run) -> bool:
    """Whether the CPU gives the same bits again (``--exact``): LAPACK's ``gelsy``, the
    CPU's default ``lstsq`` driver, does not, so its samples say nothing of the device."""
    again = _run(fn, sample, _Copier(True, False))
    if (first.error is None) != (again.error is None):
        return False
    try:
        _compare(again.out, first.out, "the CPU's second run", False)
    except Exception:  # noqa: BLE001 - any difference means: not reproducible
        return False
    return True


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _leaves(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor) and t.requires_grad]


def _check_sample(
    fn: Callable, sample: Any, grad: bool, label: str, spy: _RandomOpSpy
) -> tuple[bool, str | None, bool, str | None]:
    """Run one sample both ways. Returns (ran_on_cpu, fwd_error, grad_checked, grad_error)."""
    # The spy watches the device's run: on the CPU, any active dispatch mode makes ATen's
    # composites take their paths for tensor subclasses (``matmul`` with a batch of one
    # folds into an ``mm``), so the reference would not be eager's (a neuron tensor is a
    # subclass either way)
    cpu = _run(fn, sample, _Copier(True, grad))
    copier = _Copier(False, grad)
    dev = _run(fn, sample, copier, spy)
    if spy.random or (_exact and not _reproducible(fn, sample, cpu)):
        return False, None, False, None
    if cpu.error is not None:
        if dev.error is None:
            return True, f"{label}: CPU raised {_first_line(cpu.error)}; neuron did not", False, None
        return False, None, False, None
    if dev.error is not None:
        return True, f"{label}: {_first_line(dev.error)}", False, None
    try:
        _compare(dev.out, cpu.out, f"{label} output",
                 copier.saw_neuron and not copier.saw_cpu_device)
        _compare(_tensors(dev.inputs), _tensors(cpu.inputs), f"{label} inputs after the op", False)
    except Exception as e:  # noqa: BLE001
        return True, _first_line(e), False, None
    if not grad:
        return True, None, False, None
    cpu_in = _leaves(cpu.inputs)
    cpu_outs = _differentiable(tree_flatten(cpu.out)[0])
    if not cpu_in or not cpu_outs:
        return True, None, False, None
    g = torch.Generator().manual_seed(1234)
    cot = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in cpu_outs]
    try:
        expected = _grads(cpu.out, cpu_in, cot)
    except Exception:  # noqa: BLE001 - not differentiable on CPU: nothing to compare
        return True, None, False, None
    try:
        actual = _grads(dev.out, _leaves(dev.inputs), [c.to("neuron") for c in cot])
        _compare(list(actual), list(expected), f"{label} grad", False)
    except Exception as e:  # noqa: BLE001
        return True, None, True, f"{label}: {_first_line(e)}"
    return True, None, True, None


def _samples(op: Any, grad: bool) -> list[Any]:
    """The op's float32 samples, made on ``neuron`` (as device-generic tests make them).

    A few sample functions test ``type(t) is torch.Tensor`` and so yield nothing for
    a tensor subclass; those samples are made on CPU and moved to the device.
    """
    samples = list(op.sample_inputs("neuron", DTYPE, requires_grad=grad))
    if samples:
        return samples
    torch.manual_seed(0)
    samples = list(op.sample_inputs("cpu", DTYPE, requires_grad=grad))
    move = _Mover()
    return [s.transform(move) for s in samples]


class _Mover:
    """CPU sample tensor -> neuron leaf with the same requires_grad (aliases stay aliases)."""

    def __init__(self) -> None:
        self.memo: dict[int, torch.Tensor] = {}

    def __call__(self, x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) not in self.memo:
            y = x.detach().to("neuron").requires_grad_(x.requires_grad)
            self.memo[id(x)] = y
        return self.memo[id(x)]


def check_op(op: Any, grad: bool = True, inplace: bool = True, timeout: int = 0) -> OpResult:
    """Compare every float32 sample of ``op`` on neuron against CPU."""
    res = OpResult(op_id(op), "pass")
    reason = unspecified_reason(op)
    if reason is not None:
        res.status, res.reason = "skipped", reason
        return res
    if DTYPE not in op.supported_dtypes("cpu"):
        res.status, res.reason = "no-float32", "float32 not supported on CPU"
        return res
    t0 = time.perf_counter()
    grad = grad and op.supports_autograd
    ran = grad_ran = 0
    samples: list[Any] = []
    try:
        with _time_limit(timeout):
            torch.manual_seed(0)
            samples = _samples(op, grad)
            random_ops: set[str] = set()
            variants: list[tuple[str, Callable, bool]] = [("fn", op.op, grad)]
            if inplace and op.inplace_variant is not None:
                variants.append(("inplace", op.inplace_variant, False))
            for i, sample in enumerate(samples):
                for label, fn, g in variants:
                    spy = _RandomOpSpy()
                    ok, err, gchecked, gerr = _check_sample(fn, sample, g, f"{label}#{i}", spy)
                    if spy.random:  # this sample's result is unspecified: not counted
                        random_ops |= spy.random
                        continue
                    ran += ok
                    grad_ran += gchecked
                    if err is not None:
                        res.details.append(err)
                        if not res.error:
                            res.error = err
                    if gerr is not None:
                        res.details.append(gerr)
                        if not res.grad_error:
                            res.grad_error = gerr
    except Exception as e:  # noqa: BLE001 - never let one op crash the sweep
        res.error = res.error or f"harness: {_first_line(e)}"
        res.details.append(traceback.format_exc(limit=3))
        ran = max(ran, 1)
    res.samples, res.grad_samples = ran, grad_ran
    if res.error:
        res.status = "fail"
    elif ran == 0 and random_ops:
        res.status = "skipped"
        res.reason = "draws random numbers (" + ", ".join(sorted(random_ops)) + ")"
    elif ran == 0:
        res.status = "cpu-only-errors" if samples else "no-samples"
    if grad_ran:
        res.grad_status = "fail" if res.grad_error else "pass"
    res.seconds = time.perf_counter() - t0
    return res


def find_ops(names: list[str] | None = None) -> list[Any]:
    """OpInfo entries, all of them or those named (by ``op_id`` or by plain name)."""
    from torch.testing._internal.common_methods_invocations import op_db

    if not names:
        return list(op_db)
    wanted = set(names)
    exact = [op for op in op_db if op_id(op) in wanted]
    named = {op_id(op) for op in exact}
    return [op for op in op_db if op_id(op) in wanted or (op.name in wanted and op.name not in named)]


def _summary(results: list[OpResult]) -> dict[str, Any]:
    counted = [r for r in results if r.status in ("pass", "fail", "crash")]
    fwd_pass = sum(r.status == "pass" for r in counted)
    graded = [r for r in results if r.grad_status in ("pass", "fail")]
    grad_pass = sum(r.grad_status == "pass" for r in graded)
    return {
        "forward": {"passed": fwd_pass, "total": len(counted),
                    "rate": fwd_pass / len(counted) if counted else 1.0},
        "grad": {"passed": grad_pass, "total": len(graded),
                 "rate": grad_pass / len(graded) if graded else 1.0},
        "skipped": {r.op: r.reason for r in results if r.status == "skipped"},
        "excluded": {r.op: r.status for r in results
                     if r.status in ("cpu-only-errors", "no-samples", "no-float32")},
    }  # fmt: skip


def _run_isolated(names: list[str], flags: list[str], verbose: bool) -> list[OpResult]:
    """Run the ops in a worker process, restarting it after a hard crash.

    Why: a C++ abort (std::terminate in an autograd worker thread, a segfault in a
    kernel) cannot be caught in-process; it must cost one op, not the sweep.
    """
    results: list[OpResult] = []
    todo = list(names)
    while todo:
        cmd = [sys.executable, __file__, "--worker", "--ops", ",".join(todo), *flags]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        current: str | None = None
        for line in proc.stdout:
            if line.startswith("START "):
                current = line[6:].strip()
            elif line.startswith("RESULT "):
                r = OpResult(**json.loads(line[7:]))
                results.append(r)
                todo.remove(r.op)
                current = None
                if verbose:
                    print(f"{r.status:>15} {r.grad_status:>5} {r.seconds:6.2f}s {r.op}", flush=True)
        _, err = proc.communicate()
        if not todo:
            break
        crashed = current if current is not None else todo[0]
        tail = [ln for ln in err.splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"]
        r = OpResult(crashed, "crash", samples=1, error=f"process died: {tail[0][:200]}")
        results.append(r)
        todo.remove(crashed)
        if verbose:
            print(f"{r.status:>15} {r.grad_status:>5} {r.seconds:6.2f}s {r.op}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", help="comma-separated OpInfo names (name or name.variant)")
    p.add_argument("--limit", type=int, default=0, help="only the first N ops")
    p.add_argument("--json", help="write per-op results and the summary here")
    p.add_argument("--grad", action=argparse.BooleanOptionalAction, default=True,
                   help="also compare input gradients of supports_autograd ops")
    p.add_argument("--inplace", action=argparse.BooleanOptionalAction, default=True,
                   help="also run each op's in-place variant")
    p.add_argument("--timeout", type=int, default=PER_OP_TIMEOUT_S, help="seconds per op")
    p.add_argument("--exact", action="store_true",
                   help="compare bit for bit (NaN payloads aside), not within tolerances")
    p.add_argument("-v", "--verbose", action="store_true", help="print every op as it runs")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    global _exact
    _exact = a.exact

    warnings.filterwarnings("ignore")
    ops = find_ops(a.ops.split(",") if a.ops else None)
    if a.limit:
        ops = ops[: a.limit]
    t0 = time.perf_counter()
    if a.worker:
        import torchneuron  # noqa: F401 - registers the neuron device

        for op in ops:
            print("START " + op_id(op), flush=True)
            r = check_op(op, grad=a.grad, inplace=a.inplace, timeout=a.timeout)
            print("RESULT " + json.dumps(vars(r)), flush=True)
        return 0
    flags = ["--grad" if a.grad else "--no-grad", "--inplace" if a.inplace else "--no-inplace",
             "--timeout", str(a.timeout), *(["--exact"] if a.exact else [])]
    results = _run_isolated([op_id(op) for op in ops], flags, a.verbose)
    s = _summary(results)
    print("\nskipped (results unspecified):")
    for name, why in s["skipped"].items():
        print(f"  {name}: {why}")
    if s["excluded"]:
        print("excluded from the denominator (no float32 sample runs on CPU):")
        for name, why in s["excluded"].items():
            print(f"  {name}: {why}")
    print("\nforward failures:")
    for r in results:
        if r.status in ("fail", "crash"):
            print(f"  {r.op}: {r.error}")
    print("gradient failures:")
    for r in results:
        if r.grad_status == "fail":
            print(f"  {r.op}: {r.grad_error}")
    f, g = s["forward"], s["grad"]
    print(f"\nforward: {f['passed']}/{f['total']} ops = {100 * f['rate']:.2f}%")
    print(f"gradient: {g['passed']}/{g['total']} ops = {100 * g['rate']:.2f}%")
    print(f"({time.perf_counter() - t0:.0f}s)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"summary": s, "ops": [vars(r) for r in results]}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
