"""ReLU and one-sided clamps fused into eager's kernel (``interpreter.collapse.clamp``).

Why: the fusion replaces the compare + select that ReLU lowers to (kept so that
``relu(-0.0)`` is -0.0, as in eager) by ``torch.relu`` / ``clamp_min`` / ``clamp_max``.
It is only right where those kernels give the select's bits for every input: NaN
payloads and signs, signed zeros, infinities, subnormals, in the vector loop and its
scalar tail, strided or not, on every vector width ATen may pick. (With denormals
flushed, eager's kernels flush subnormal results and the fused op, being eager's kernel,
does too.) Each case compares the fused run with the same program run op by op and with
eager PyTorch on CPU; ``test_a_wrong_kernel_is_caught`` shows the comparison fails for
kernels that differ from the select only in those corners.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from torchneuron.compiler.interpreter import load
from torchneuron.compiler.interpreter.collapse import clamp as _fuse_clamp
from torchneuron.compiler.interpreter.collapse import plugins
from torchneuron.compiler.interpreter.collapse.base import Collapsed
from torchneuron.compiler.pipeline import compile_graph

_interpret = importlib.import_module("torchneuron.compiler.interpreter.interpret")
_INT = {torch.float32: torch.int32, torch.float64: torch.int64,
        torch.float16: torch.int16, torch.bfloat16: torch.int16}  # fmt: skip
_FUSED = "torchneuron.collapsed.clamp_bound"

# NaN bit patterns beyond the default one: signalling and quiet, both signs, payloads
_NAN_BITS = {
    torch.float32: [0x7F800001, 0x7FC00001, 0x7FBFFFFF, -0x007FFFFF, -0x003EDCBB],
    torch.float64: [0x7FF0000000000001, 0x7FF8000000000001, 0x7FF4000000000000,
                    -0x0007FFFFFFFFFFFF],
}  # fmt: skip


def _specials(dtype: torch.dtype, n: int, seed: int) -> torch.Tensor:
    """``n`` values drawn from the corners: NaNs, signed zeros, infinities, subnormals,
    the extremes, values at and around the bounds the tests use, and random normals."""
    fi = torch.finfo(dtype)
    values = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), -float("nan"), 1.0, -1.0,
              2.0, -2.0, 0.5, -1.5, fi.tiny, -fi.tiny, fi.tiny / 4, -fi.tiny / 4, fi.max,
              -fi.max, fi.eps, -fi.eps]  # fmt: skip
    base = torch.tensor(values, dtype=dtype).view(_INT[dtype])
    table = torch.cat([base, torch.tensor(_NAN_BITS[dtype], dtype=_INT[dtype])]).view(dtype)
    g = torch.Generator().manual_seed(seed)
    x = table[torch.randint(0, len(table), (n,), generator=g)]
    x[::5] = torch.randn(len(x[::5]), generator=g, dtype=dtype)
    return x


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_INT[t.dtype])


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _run(fn: Callable[..., torch.Tensor], args: list[torch.Tensor],
         monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, torch.Tensor, list[str]]:  # fmt: skip
    """(fused run, op-by-op run, names of the fused ops) of ``fn``'s compiled program."""
    module = compile_graph(fn, args)._module()
    prepared = load(module)
    fast = prepared.run(args)[0]
    fast_again = prepared.run(args)[0]  # from the kept constants (the fusion's checks kept)
    assert _same_bits(fast, fast_again)
    body = prepared.block(module.functions[module.entry].body)
    fused = [s.op.name for s in body.steps if isinstance(s.op, Collapsed)]
    with monkeypatch.context() as m:
        m.setattr(plugins, "PLUGINS", ())
        m.setattr(plugins, "LATE", ())
        m.setattr(plugins, "EARLY", ())
        slow = load(module).run(args)[0]
    return fast, slow, fused


_CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "F.relu_inplace": lambda x: F.relu(x.clone(), inplace=True),
    "relu_strided": lambda x: torch.relu(x.t()),
    "clamp_min": lambda x: x.clamp_min(0.5),
    "clamp_min_neg_zero": lambda x: x.clamp_min(-0.0),
    "clamp_min_neg_inf": lambda x: x.clamp_min(float("-inf")),
    "clamp_max": lambda x: x.clamp_max(-1.5),
    "clamp_max_zero": lambda x: x.clamp_max(0.0),
    "clamp_max_inf": lambda x: x.clamp_max(float("inf")),
    "hardtanh": F.hardtanh,
    "relu6": F.relu6,
    # the select writes a bound whose zero has the other sign than the threshold's
    "where_neg_zero": lambda x: torch.where(x < 0.0, torch.tensor(-0.0, dtype=x.dtype), x),
    "where_pos_zero_above": lambda x: torch.where(x > -0.0, torch.tensor(0.0, dtype=x.dtype), x),
}


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clamp_is_fused_and_exact(case: str, dtype: torch.dtype,
                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Fused, and the op-by-op bits and eager's, over the corner values (67 x 9 elements:
    full vectors and a scalar tail per row of the strided case)."""
    fn = _CASES[case]
    x = _specials(dtype, 67 * 9, seed=len(case)).reshape(67, 9)
    fast, slow, fused = _run(fn, [x], monkeypatch)
    assert _FUSED in fused
    assert _same_bits(fast, slow)
    assert _same_bits(fast, fn(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_relu_with_denormals_flushed_gives_eagers_bits(dtype: torch.dtype,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """With denormals flushed (``torch.set_flush_denormal``) eager's kernels write a
    subnormal result as a zero of its sign; the fused kernel is eager's, so it does too.
    (The op-by-op select copies the subnormal's bits: there the pair differs from eager,
    and the fusion follows eager, see ``_fuse_clamp``.)"""
    x = _specials(dtype, 1000, seed=3)
    sub = (x.abs() < torch.finfo(dtype).tiny).logical_and(x != 0)
    assert bool(sub.any())
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    try:
        for fn in (torch.relu, lambda t: t.clamp_max(0.0)):
            fast, slow, fused = _run(fn, [x], monkeypatch)
            assert _FUSED in fused
            assert _same_bits(fast, fn(x))
            # everywhere but the subnormals, the op-by-op bits too
            assert torch.equal(_bits(fast)[~sub], _bits(slow)[~sub])
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.parametrize("dtype", [torch.float16])
def test_half_precision_is_not_fused(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """float16: ATen's vector loop quiets a signalling NaN (the select keeps it), so the
    pair runs as is. (bfloat16 replaces every NaN by 0xFFFF there: a NaN payload, which
    the compiler does not promise.)"""
    x = torch.tensor([0x7C01, 0xFC01 - (1 << 16), 0x7E00, 0x8000 - (1 << 16)] * 16,
                     dtype=torch.int16).view(dtype)  # fmt: skip
    # (ATen's AVX2 and AVX-512 vector loops change these NaNs' bits, its default scalar
    # loop does not: nothing below depends on which one this CPU runs)
    fast, slow, fused = _run(torch.relu, [x], monkeypatch)
    assert _FUSED not in fused
    assert _same_bits(fast, slow) and _same_bits(fast, x)


@pytest.mark.parametrize("bound", [float("nan"), 1e-40, -1e-40])
def test_bounds_the_kernel_would_not_write_are_not_fused(bound: float,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A NaN bound (``clamp_min`` would give NaN everywhere; ``x < NaN`` is false) and a
    subnormal one (flushed to zero when the kernel converts it, with denormals flushed):
    matched, refused by the fusion's check, the original ops run."""
    x = _specials(torch.float32, 200, seed=5)
    b = torch.tensor(bound, dtype=torch.float32)
    fn = lambda t: torch.where(t < b.item(), b, t)  # noqa: E731
    fast, slow, fused = _run(fn, [x], monkeypatch)
    assert _FUSED in fused
    assert _same_bits(fast, slow) and _same_bits(fast, fn(x))


def test_bound_other_than_threshold_is_not_fused(monkeypatch: pytest.MonkeyPatch) -> None:
    """``where(x < 0, 1, x)`` is no clamp: the original ops run."""
    x = _specials(torch.float32, 200, seed=6)
    fn = lambda t: torch.where(t < 0.0, torch.tensor(1.0), t)  # noqa: E731
    fast, slow, fused = _run(fn, [x], monkeypatch)
    assert _same_bits(fast, slow) and _same_bits(fast, fn(x))


def test_threshold_and_bound_read_at_run_time_are_not_trusted() -> None:
    """A threshold or bound that is a program input can be written in place between
    runs: the program follows it, as eager does (a one-time check would go stale)."""
    x = _specials(torch.float32, 64, seed=7)
    t = torch.zeros(64)
    fn = lambda x, t: torch.where(x < t, t, x)  # noqa: E731
    p = load(compile_graph(fn, [x, t])._module())
    assert _same_bits(p.run([x, t])[0], fn(x, t))
    t.fill_(1.0)
    assert _same_bits(p.run([x, t])[0], fn(x, t))
    t[3] = -0.0
    assert _same_bits(p.run([x, t])[0], fn(x, t))


_WRONG_KERNELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    # IEEE max(x, 0): +0.0 for -0.0 (the lowering's old ``maximum``)
    "ieee_max": lambda x: torch.clamp_min(x, 0.0) + 0.0,
    # x > 0 ? x : 0: a NaN becomes 0 and -0.0 becomes +0.0
    "where_gt": lambda x: torch.where(x > 0, x, 0.0),
    # every NaN made the default NaN (the half-precision loops' kind of change)
    "canonical_nan": lambda x: torch.where(torch.isnan(x), float("nan"), torch.relu(x)),
    # the right kernel but only on the vector loop's part: a wrong scalar tail
    "wrong_tail": lambda x: torch.cat([torch.relu(x.reshape(-1)[:-3]),
                                       x.reshape(-1)[-3:].abs()]).reshape(x.shape),
}  # fmt: skip


@pytest.mark.parametrize("wrong", sorted(_WRONG_KERNELS))
def test_a_wrong_kernel_is_caught(wrong: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exactness test fails for a fusion giving a kernel that differs from the select
    only in the corners (signed zeros, NaN payloads, the scalar tail)."""
    kernel = _WRONG_KERNELS[wrong]
    monkeypatch.setattr(_fuse_clamp, "_kernel", lambda direction, bound: kernel)
    with pytest.raises(AssertionError):
        for dtype in (torch.float32, torch.float64):
            test_clamp_is_fused_and_exact("relu", dtype, monkeypatch)
    # the control: the same patching with eager's kernel passes
    monkeypatch.setattr(_fuse_clamp, "_kernel", lambda direction, bound: torch.relu)
    for dtype in (torch.float32, torch.float64):
        test_clamp_is_fused_and_exact("relu", dtype, monkeypatch)


_KERNEL_CHECK = textwrap.dedent("""
    import sys, torch
    torch.set_num_threads(1)
    print(torch.backends.cpu.get_cpu_capability())
    ints = {torch.float32: torch.int32, torch.float64: torch.int64}
    bad = []
    for dt, it in ints.items():
        fi = torch.finfo(dt)
        vals = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"),
                             -float("nan"), 1.0, -1.0, 0.5, -1.5, fi.tiny, -fi.tiny,
                             fi.tiny / 4, -fi.tiny / 4, fi.max, -fi.max], dtype=dt)
        nans = {torch.float32: [0x7F800001, 0x7FC00001, -0x007FFFFF],
                torch.float64: [0x7FF0000000000001, -0x0007FFFFFFFFFFFF]}[dt]
        table = torch.cat([vals.view(it), torch.tensor(nans, dtype=it)]).view(dt)
        for n in (1, 7, 8, 15, 16, 17, 33, 67, 1000):
            g = torch.Generator().manual_seed(n)
            x = table[torch.randint(0, len(table), (n,), generator=g)]
            strided = torch.zeros(2 * n, dtype=dt)
            strided[::2] = x
            for xx in (x, strided[::2]):
                for cmp, kernel, b in ((torch.lt, torch.clamp_min, 0.0),
                                       (torch.lt, torch.clamp_min, -0.0),
                                       (torch.lt, torch.clamp_min, 0.5),
                                       (torch.gt, torch.clamp_max, -1.5),
                                       (torch.gt, torch.clamp_max, 0.0)):
                    full = torch.full_like(xx, b)
                    want = torch.where(cmp(xx, full), full, xx)
                    got = [kernel(xx, b)]
                    if kernel is torch.clamp_min and str(b) == "0.0":  # ReLU
                        got += [torch.relu(xx), xx.clone().relu_()]
                    for y in got:
                        if not torch.equal(y.contiguous().view(it),
                                           want.contiguous().view(it)):
                            bad.append((str(dt), n, kernel.__name__, b))
    print(bad[:5])
    sys.exit(1 if bad else 0)
""")


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_kernels_match_the_select_on_each_vector_width(capability: str) -> None:
    """What the fusion rests on, on each vector width ATen may dispatch to here
    (``ATEN_CPU_CAPABILITY``; a width the CPU lacks falls back to a lower one): eager's
    ``relu`` / ``relu_`` / ``clamp_min`` / ``clamp_max`` give the compare + select's bits
    for float32 and float64, contiguous and strided, subnormals included."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    out = subprocess.run([sys.executable, "-c", _KERNEL_CHECK], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
