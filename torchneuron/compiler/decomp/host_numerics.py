"""What eager's CPU kernels give at special values, asked of eager on this machine.

Some of eager's results depend on the CPU it runs on: ATen picks a vectorised loop by
the CPU's instruction set (``ATEN_CPU_CAPABILITY``: default, AVX2, AVX-512), and the
same ``gelu`` gives inf at +inf on one machine and NaN on another (the erf of the
vector loop multiplies inf by 0 in one build of it and not in another). A lowering that
hard-codes one machine's answer is wrong on the next. For such points the lowering asks
eager here, at trace time, and puts eager's answer into the graph as a constant; the
StableHLO text, hence the cache key, then records which answer it holds, and
``fingerprint()`` (part of the index key) keeps an index entry made on a machine that
answers differently from being followed here.

Lowerings that emulate one of eager's loops (a fused multiply-add through float64, a
correctly rounded hypot) hold only where eager takes that loop: ``premise_holds`` runs
the emulation and eager on the same sample here, outside any trace, once per process,
and a lowering whose premise fails on this CPU is refused (``cpu-dependent-premise``).

Eager is asked twice per point: one element alone (the scalar loop) and a run long
enough to fill every vector width (the vector loop and its tail). When the two give
different numbers, eager's own answer depends on where the element sits, no constant can
match it, and the caller refuses the op (``PrepareError``, reason
``cpu-dependent-special-value``). A zero answer takes the run's sign: the two loops may
disagree on the sign of a zero (float32 ``gelu(-0.0)`` alone is -0.0, in a run +0.0),
equal numbers, so a one-element tensor may get the other zero.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch.utils._python_dispatch import _disable_current_modes

from torchneuron.compiler.errors import PrepareError

__all__ = ["SPECIAL_POINTS", "PROBES", "eager_at_specials", "fingerprint", "premise_holds",
           "refuse_unless_premise", "register_premise", "settle", "sample",
           "register_multiply_add", "multiply_add_form"]

# the points whose answers differ between CPUs: both infinities and both zeros
SPECIAL_POINTS: tuple[float, ...] = (math.inf, -math.inf, 0.0, -0.0)
_RUN = 67  # longer than two AVX-512 float32 vectors plus a tail of 3
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# the eager functions whose special values are asked of eager, by name
PROBES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "aten.gelu": lambda x: torch.ops.aten.gelu.default(x),
    "aten.gelu.tanh": lambda x: torch.ops.aten.gelu.default(x, approximate="tanh"),
}


def sample(shape: tuple[int, ...], seed: int, scale: float = 1.0) -> torch.Tensor:
    """float64 normal values from numpy's generator (no torch op a trace could capture)."""
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape) * scale)


@contextlib.contextmanager
def _outside_traces() -> Iterator[None]:
    """Plain CPU eager, whatever is tracing around the caller: no fake tensors, no
    dispatch or torch-function modes (make_fx's), no functorch layers (functionalize)."""
    with torch._subclasses.fake_tensor.unset_fake_temporarily(), _disable_current_modes(), \
            torch._C.DisableTorchFunction(), torch._C._DisableFuncTorch(), torch.no_grad():
        yield


def _answer(t: torch.Tensor) -> float:
    return float(t.to(torch.float64).item())


def _same(a: float, b: float, *, zero_sign: bool = True) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and (not zero_sign or math.copysign(1.0, a) == math.copysign(1.0, b))


@functools.cache
def _probe(name: str, dtype: torch.dtype) -> tuple[float, ...] | None:
    """The vector loop's answers (uniform over a run, or None), checked against the
    scalar loop's: equal, or both NaN. The sign of a zero answer is the vector loop's
    (float32 ``gelu(-0.0)`` alone is -0.0 and +0.0 in any longer run: equal numbers)."""
    fn = PROBES[name]
    answers = []
    with _outside_traces():
        for point in SPECIAL_POINTS:
            run = [_answer(v) for v in fn(torch.full((_RUN,), point, dtype=dtype))]
            alone = _answer(fn(torch.tensor([point], dtype=dtype)))
            if not all(_same(run[0], v) for v in run) \
                    or not _same(alone, run[0], zero_sign=False):
                return None
            answers.append(run[0])
    return tuple(answers)


def eager_at_specials(name: str, dtype: torch.dtype) -> tuple[float, ...]:
    """Eager's ``PROBES[name]`` on this CPU at each of ``SPECIAL_POINTS`` in ``dtype`` (as
    Python floats, signs of zeros kept). Raises ``PrepareError`` when eager's answer
    depends on the element's position."""
    answers = _probe(name, dtype)
    if answers is None:
        raise PrepareError(
            f"{name}: eager's {dtype} result at an infinity or a zero differs between its "
            "vectorised loop and its scalar tail on this CPU, so no lowering matches it; "
            "this region runs eagerly.", op=name, reason="cpu-dependent-special-value")
    return answers


@functools.lru_cache(maxsize=1)
def fingerprint() -> dict[str, str]:
    """Every probe's answers in every float dtype (``"pos"`` for a position-dependent
    one), and the CPU capability ATen runs at: what an executable lowered here may hold
    that a machine answering differently must not reuse."""
    out = {"aten_cpu_capability": torch.backends.cpu.get_cpu_capability()}
    for name in PROBES:
        for dtype in _FLOATS:
            answers = _probe(name, dtype)
            out[f"{name}/{dtype}"] = "pos" if answers is None else repr(answers)
    return out


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    if not torch.equal(a.isnan(), b.isnan()):
        return False
    keep = ~a.isnan()
    return torch.equal(a[keep], b[keep]) and torch.equal(a[keep].signbit(), b[keep].signbit())


Sample = Callable[[], "torch.Tensor | tuple[torch.Tensor, ...]"]
_REGISTERED: dict[tuple[str, torch.dtype], tuple[Sample, Sample]] = {}
_PREMISES: dict[tuple[str, torch.dtype], bool] = {}


def register_premise(name: str, dtype: torch.dtype, eager: Sample, ours: Sample) -> None:
    """Declare that a lowering for ``name`` in ``dtype`` holds only where the emulation
    ``ours()`` gives eager's bits (``eager()``) on this CPU. Both build their sample from
    numpy values (nothing a trace could capture) and are run by ``settle``."""
    _REGISTERED[(name, dtype)] = (eager, ours)


def settle() -> None:
    """Check every registered premise now, in plain eager: called when the decomposition
    table is built, before anything traces."""
    for key in _REGISTERED:
        premise_holds(*key)
    fingerprint()  # every special-value probe


def premise_holds(name: str, dtype: torch.dtype) -> bool:
    """Whether the registered premise ``(name, dtype)`` holds on this CPU (checked once
    per process)."""
    key = (name, dtype)
    held = _PREMISES.get(key)
    if held is None:
        eager, ours = _REGISTERED[key]
        with _outside_traces():
            want, got = eager(), ours()
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        held = _PREMISES[key] = len(want) == len(got) and all(
            _bits_equal(g, w) for g, w in zip(got, want, strict=True))
    return held


def refuse_unless_premise(name: str, dtype: torch.dtype) -> bool:
    """True if ``premise_holds``; else, while AOTAutograd traces, False (the caller
    returns NotImplemented, keeping the op in the graph: a raise there escapes
    torch.compile), and otherwise ``PrepareError`` (reason ``cpu-dependent-premise``),
    which prepare's own trace of that graph then raises."""
    if premise_holds(name, dtype):
        return True
    if torch._guards.TracingContext.try_get() is None:
        raise PrepareError(
            f"{name}: the lowering reproduces one of eager's CPU loops for {dtype}, and this "
            f"CPU ({torch.backends.cpu.get_cpu_capability()}) takes another, so its bits would "
            "differ; this region runs eagerly.", op=name, reason="cpu-dependent-premise")
    return False


def register_multiply_add(name: str, dtypes: tuple[torch.dtype, ...],
                          eager: Callable[[torch.dtype], Sample],
                          ours: Callable[[torch.dtype, bool], Sample]) -> None:
    """Premises of an op whose eager kernel ends in a multiply-add that ATen's AVX2 (and
    wider) build fuses into one rounding and its ``default`` build does not: for each
    dtype, ``"{name}(fused)"`` (not float64: no wider type emulates its fused step) and
    ``name`` (the unfused form), ``ours(dtype, fused)`` against ``eager(dtype)``."""
    for dtype in dtypes:
        if dtype != torch.float64:
            register_premise(f"{name}(fused)", dtype, eager(dtype), ours(dtype, True))
        register_premise(name, dtype, eager(dtype), ours(dtype, False))


def multiply_add_form(name: str, dtype: torch.dtype) -> bool | None:
    """The form of ``name`` this CPU's eager computes in ``dtype`` (``register_multiply_add``):
    True fused, False unfused, None refused while AOTAutograd traces (the caller returns
    NotImplemented; outside that trace ``refuse_unless_premise`` raises). float32's sample
    decides whether eager fuses (a half's rounding hides the difference on most samples);
    the dtype's own sample must agree."""
    if dtype != torch.float64 and premise_holds(f"{name}(fused)", torch.float32) \
            and premise_holds(f"{name}(fused)", dtype):
        return True
    return False if refuse_unless_premise(name, dtype) else None
