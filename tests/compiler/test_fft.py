"""FFTs are refused (``eager-fft-bits``, compiler/decomp/fft.py) and run eagerly, with
eager's bits; complex arithmetic carried as real pairs (compiler/decomp/complex.py) gives
eager's bits exactly, or is refused.

Every torch.fft op and stft is refused with a typed error at prepare (a DFT as matmuls
was off from pocketfft in the last bits of about half the elements: the exact lowering
sweep of issue 22); torch.compile and adaptive eager run them eagerly, so their results,
gradients included, are eager's bits. The complex arithmetic tests use complex inputs:
complex graph inputs and outputs cross the executable boundary as view_as_real pairs;
the handled ops equal eager bit for bit (abs/sgn and mixed real/complex arithmetic at 0,
inf, NaN, huge and subnormal values too); polar, complex sums and other complex ops are
refused; views of complex inputs and outputs are refused.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

from torchneuron.compiler import CompileError, Executable, compile_graph

FFT_OPS = ["fft.fft", "fft.fft2", "fft.fftn", "fft.ifft", "fft.ifft2", "fft.ifftn", "fft.rfft",
           "fft.rfft2", "fft.rfftn", "fft.irfft", "fft.irfft2", "fft.irfftn", "fft.hfft",
           "fft.hfft2", "fft.hfftn", "fft.ihfft", "fft.ihfft2", "fft.ihfftn", "stft"]
_F = torch.fft


def _same(got: Any, want: Any) -> None:
    """Eager's bits: every element, NaN for NaN, the sign of zero too."""
    got, want = pytree.tree_leaves(got), pytree.tree_leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.dtype, list(g.shape), w.dtype)
        g, w = (torch.view_as_real(t.resolve_conj()) if t.is_complex() else t for t in (g, w))
        nan = g.isnan() & w.isnan()
        assert bool(((g == w) | nan).all()), f"{int((~((g == w) | nan)).sum())} elements differ"
        assert torch.equal(g.signbit()[~nan], w.signbit()[~nan])


def test_every_fft_op_is_refused_at_prepare() -> None:
    """Every torch.fft op and stft, of a real and of a complex input: refused, typed,
    naming the FFT op (eager computes them with pocketfft / MKL). (OpInfo's samples of
    them: ``lowering_coverage.py --exact --only fft.fft,...``, all refused.)"""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 8, generator=g)
    z = torch.randn(4, 8, dtype=torch.complex64, generator=g)
    for name in FFT_OPS:
        fn = (lambda t: torch.stft(t[0], 4, return_complex=True)) if name == "stft" \
            else getattr(torch.fft, name.removeprefix("fft."))
        for arg in (x,) if name == "stft" or "rfft" in name or "ihfft" in name else (x, z):
            with pytest.raises(CompileError) as e:
                compile_graph(fn, [arg], name=name)
            assert e.value.stage == "prepare" and e.value.reason == "eager-fft-bits", (name, e.value)
            assert e.value.op.startswith("aten._fft_"), e.value.op


def test_fft_refusal_is_op_intrinsic() -> None:
    """Adaptive eager learns a refused FFT and runs it between regions."""
    from torchneuron.adaptive_eager.refused import _OP_REASONS

    assert "eager-fft-bits" in _OP_REASONS


def _spectrum_sum_and_grad(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``rfft(x).abs().sum()`` and its gradient, compiled on neuron then eager on CPU."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft(x * 2).abs().sum() * 3

    xd = x.to("neuron").requires_grad_()
    out = torch.compile(f, backend="neuron")(xd)
    out.backward()
    xc = x.clone().requires_grad_()
    ref = f(xc)
    ref.backward()
    return out.cpu(), xd.grad.cpu(), ref, xc.grad


def test_torch_compile_with_autograd_runs_ffts_eagerly_with_eagers_bits() -> None:
    import torchneuron  # noqa: F401
    import torchneuron.compiler as tc

    torch._dynamo.reset()
    tc.reset_stats()
    out, grad, ref, ref_grad = _spectrum_sum_and_grad(
        torch.randn(4, 16, generator=torch.Generator().manual_seed(2)))
    stats = tc.stats()
    assert stats["failures_by_stage"].get("prepare:eager-fft-bits", 0) >= 1, stats
    _same(out, ref)
    _same(grad, ref_grad)


def test_adaptive_eager_loop_of_ffts_gives_eagers_bits() -> None:
    """rfft / irfft on neuron tensors for 8 steps: eager's bits (the FFTs run eagerly,
    refused in any region; verify is on)."""
    import torchneuron  # noqa: F401
    import torchneuron.adaptive_eager as ae
    from torchneuron.hardware.settings import override

    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(4, 32, generator=g) for _ in range(8)]
    w = torch.randn(17, generator=g)

    def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (torch.fft.irfft(torch.fft.rfft(x) * w, n=32) * 2 + x).sum(1)

    want = [step(x, w) for x in xs]
    ae.disable()
    ae.reset()
    try:
        with override(verify=True), ae.enabled():
            wd = w.to("neuron")
            got = [step(x.to("neuron"), wd).cpu() for x in xs]
        stats = ae.stats()
    finally:
        ae.disable()
        ae.reset()
    assert stats["fallback_reasons"].get("verify-mismatch", 0) == 0, stats
    for g_, w_ in zip(got, want, strict=True):
        _same(g_, w_)


def test_complex_inputs_and_outputs_cross_the_boundary_as_pairs() -> None:
    """A complex64 input goes in as f32[..., 2] (8 bytes an element), a complex output
    comes back complex with eager's strides, and the executable round-trips as data."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 5, dtype=torch.complex64, generator=g)
    w = torch.randn(5, generator=g)

    def fn(c: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, ...]:
        spec = c * (r + 1)
        return (spec.mT, (spec * r + 1j).conj(), c.real * 2, torch.complex(c.imag, r).abs())

    exe = _compile_or_refused(fn, [z, w], "boundary", uses_abs=True)
    if exe is None:
        return
    sig = exe.signature
    assert sig["complex_inputs"] == [0] and len(sig["complex_outputs"]) == 2
    assert sig["inputs"][0]["shape"] == [3, 5, 2] and sig["inputs"][0]["dtype"] == "torch.float32"
    exe = Executable.from_bytes(exe.to_bytes())  # data only; format 2 carries the fields
    got = exe.run([z, w])
    want = fn(z, w)
    _same(got, want)
    assert got[0].stride() == want[0].stride()


# Complex arithmetic decomp_complex carries as pairs: compiled, eager's bits.
HANDLED = {
    "abs_max": lambda z, w, t: z.abs().max(), "div_real": lambda z, w, t: z / (t + 10),
    "mul_complex": lambda z, w, t: z * w, "sub_alpha": lambda z, w, t: torch.sub(z, w, alpha=2),
    "add_scalar": lambda z, w, t: z + (1 + 2j), "neg": lambda z, w, t: -z,
    "reshape_t": lambda z, w, t: (z * 2).reshape(-1, 3).T.contiguous(),
    "fftshift": lambda z, w, t: _F.fftshift(z * 2), "roll": lambda z, w, t: torch.roll(z * 2, 2, 1),
    "stack": lambda z, w, t: torch.stack([z * 2, w * 2]),
    "cat_real": lambda z, w, t: torch.cat([z * 2, t]),
    "expand": lambda z, w, t: z[:, None].expand(4, 3, 6) * 2,
    "where": lambda z, w, t: torch.where(t > 0, z, 0),
    "power": lambda z, w, t: (z * z.conj()).real, "to_real": lambda z, w, t: z.to(torch.float32),
    "to_complex128": lambda z, w, t: z.to(torch.complex128),
    "complex": lambda z, w, t: torch.complex(t, t * 2) * z,
    "real_imag": lambda z, w, t: (z * 2).real + (z * 3).imag,
}
# Complex ops it does not handle, or whose bits it would not give: refused, typed.
REFUSED = {
    "angle": lambda z, w, t: z.angle(), "pow": lambda z, w, t: z ** 2,
    "exp": lambda z, w, t: z.exp(), "eq": lambda z, w, t: z * 2 == w,
    "div_complex": lambda z, w, t: z / w, "norm": lambda z, w, t: torch.linalg.norm(z * 2),
    "var": lambda z, w, t: torch.var(z * 2), "index": lambda z, w, t: (z * 2)[[0, 2]],
    # eager's sin and cos, and its complex sum's order (were lowered: last bits off)
    "polar": lambda z, w, t: torch.polar(t.abs(), t * 3),
    "sum": lambda z, w, t: (z * 2).sum(), "sum_dim": lambda z, w, t: (z * 2).sum(1),
    "mean": lambda z, w, t: (z * 2).mean(0),
}


def _abs_refused_here() -> bool:
    """Whether this CPU's eager complex64 ``abs`` is not the hypot the lowering computes
    (at ``ATEN_CPU_CAPABILITY=default`` it is not): ``abs`` and ``sgn`` are then refused
    (``decomp.complex``), and the graphs below that use them must be refused, typed."""
    from torchneuron.compiler.decomp.host_numerics import premise_holds

    return not premise_holds("aten.abs", torch.complex64)


def _compile_or_refused(fn: Any, args: list[torch.Tensor], name: str, uses_abs: bool) -> Any:
    """``compile_graph(fn)``, or None after checking the refusal where ``abs`` is refused."""
    if uses_abs and _abs_refused_here():
        with pytest.raises(CompileError) as e:
            compile_graph(fn, args, name=name)
        assert e.value.stage == "prepare" and e.value.reason == "complex-op", e.value
        return None
    return compile_graph(fn, args, name=name)


def _complex_operands(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, 6, dtype=torch.complex64, generator=g),
            torch.randn(4, 6, dtype=torch.complex64, generator=g), torch.randn(4, 6, generator=g)]


def test_complex_arithmetic_compiles_to_eagers_bits() -> None:
    args = _complex_operands(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager's "casting complex to real discards..."
        for name, fn in HANDLED.items():
            exe = _compile_or_refused(fn, args, name, uses_abs=name == "abs_max")
            if exe is not None:
                _same(exe.run(args), fn(*args))


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_other_complex_ops_are_refused(name: str) -> None:
    with pytest.raises(CompileError) as e:
        compile_graph(REFUSED[name], _complex_operands(5), name=name)
    assert e.value.stage == "prepare" and e.value.reason == "complex-op", e.value


def test_real_graphs_do_not_change() -> None:
    """The complex entries hand real values on: the graph of a real program is the
    same as without them (its StableHLO text, hence its cache key and sim time)."""
    import torchneuron.compiler.decomp.complex as decomp_complex
    from torchneuron.compiler.decomp.table import decomposition_table
    from torchneuron.compiler.prepare.graph import prepare

    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c = torch.sgn(a) * b + a.abs() - a.new_zeros(4, 6) + torch.cat([a, b]).sum() / 3
        d = torch.where(a > 0, -b, 1.0).mean(0) + torch.roll(a, 1, 0)[1, 1:].sum() - a[2:, 3].sum()
        e = torch.nn.functional.pad(a.t(), (1, 2)).unsqueeze(0).expand(2, 6, 7).flip(1)
        return c, d, e.to(torch.float64).reshape(-1)[::3].sum(0, keepdim=True)

    a, b = torch.randn(4, 6), torch.randn(4, 6)
    with_complex = prepare(fn, [a, b]).graph_text
    saved = dict(decomp_complex.COMPLEX_DECOMPOSITIONS)
    try:
        decomp_complex.COMPLEX_DECOMPOSITIONS.clear()
        decomposition_table.cache_clear()
        without = prepare(fn, [a, b]).graph_text
    finally:
        decomp_complex.COMPLEX_DECOMPOSITIONS.update(saved)
        decomposition_table.cache_clear()
    assert with_complex == without


def test_prepared_graph_reference_run_takes_and_gives_complex_values() -> None:
    """``PreparedGraph.run_reference`` (what lowerings are checked against) converts at
    the same boundary as the executable."""
    from torchneuron.compiler.prepare.graph import prepare

    z = torch.randn(3, 4, dtype=torch.complex64, generator=torch.Generator().manual_seed(6))

    def fn(c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return c * 2, c.imag * 2

    prepared = prepare(fn, [z])
    assert prepared.complex_inputs == [0] and prepared.complex_outputs == [0]
    _same(prepared.run_reference([z]), fn(z))


def _complex_of(t: torch.Tensor) -> torch.Tensor:
    return torch.complex(t, t * 2)


# Outputs that eager returns as views of a complex input or output: the graph
# computes on pairs and could only return copies (which would not follow a later
# in-place write), so these are refused.
REAL_VIEWS_OF_COMPLEX = {
    "view_as_real_of_input": (lambda c: (torch.view_as_real(c), c.abs()), True),
    "real_of_input": (lambda c: c.real, True),
    "imag_of_input": (lambda c: (c * 2, c.imag), True),
    "real_of_output": (lambda t: (lambda f: (f, f.real))(_complex_of(t)), False),
    "imag_of_output": (lambda t: (lambda f: (f, f.real, f.imag))(_complex_of(t)), False),
    "view_as_real_of_output": (lambda t: (lambda f: (f, torch.view_as_real(f)))(
        _complex_of(t)), False),
    # complex views that decomp_complex computes (conj is a copy of the pairs)
    "conj_of_input": (lambda c: c.conj(), True),
    "conj_of_output": (lambda t: (lambda f: (f, f.conj()))(_complex_of(t)), False),
}


@pytest.mark.parametrize("name", sorted(REAL_VIEWS_OF_COMPLEX))
def test_views_of_complex_inputs_and_outputs_are_refused(name: str) -> None:
    fn, complex_input = REAL_VIEWS_OF_COMPLEX[name]
    g = torch.Generator().manual_seed(8)
    x = torch.randn(4, 10, dtype=torch.complex64 if complex_input else torch.float32, generator=g)
    with pytest.raises(CompileError) as e:
        compile_graph(fn, [x], name=name)
    assert e.value.stage == "prepare" and e.value.reason == "complex-alias", e.value


def test_real_view_returned_by_torch_compile_follows_the_complex_tensor() -> None:
    """Refused, so it runs eagerly: ``f.real`` follows ``f.mul_(0)`` as in eager."""
    import torchneuron  # noqa: F401

    torch._dynamo.reset()
    x = torch.randn(4, 10, generator=torch.Generator().manual_seed(9))
    f, r = torch.compile(lambda a: (lambda f: (f, f.real))(_complex_of(a)),
                         backend="neuron")(x.to("neuron"))
    f.mul_(0)
    fe = _complex_of(x)
    re_ = fe.real
    fe.mul_(0)
    _same(r.cpu(), re_)


def test_conjugate_and_strided_complex_inputs_are_read_as_their_values() -> None:
    """A conj-bit view (``z.conj()``) and a strided slice go in as the pairs of the values
    they show, as eager reads them."""
    g = torch.Generator().manual_seed(7)
    z = torch.randn(3, 8, dtype=torch.complex64, generator=g)

    def fn(c: torch.Tensor) -> torch.Tensor:
        return c * (2 + 1j)

    for c in (z.conj(), z[:, 1::2], z.conj()[1:]):
        _same(compile_graph(fn, [c]).run([c]), fn(c))


def test_complex_clone_keeps_its_memory_format() -> None:
    """The clone decomposition alone (not the restride after it) gives a contiguous
    complex clone; a channels_last one compiles with eager's strides."""
    from torchneuron.compiler.decomp.complex import clone

    z = torch.randn(4, 10, dtype=torch.complex64).t()
    got = clone(z, memory_format=torch.contiguous_format)
    assert got.is_contiguous() and torch.equal(got, z)
    assert clone(z).stride() == z.stride()
    z4 = torch.randn(2, 3, 2, 3, dtype=torch.complex64)

    def fn(c: torch.Tensor) -> torch.Tensor:
        return c.clone(memory_format=torch.channels_last)

    (got,) = compile_graph(fn, [z4]).run([z4])
    assert got.stride() == fn(z4).stride() and torch.equal(got, z4)


def _magnitude_grid() -> torch.Tensor:
    """Complex values whose parts run over fp32 from the smallest subnormal to the
    largest finite value, with 0, inf and NaN, both signs: every pair."""
    mags = [0.0, 1e-45, 3e-44, 1e-40, 3e-40, 1.2e-38, 1e-30, 3e-22, 1e-10, 0.5, 1.0, 3.0,
            1e10, 3e20, 1e30, 1.7e38, 3e38, 3.4e38, float("inf"), float("nan")]
    vals = mags + [-m for m in mags[1:]]
    re, im = zip(*itertools.product(vals, vals), strict=True)
    return torch.complex(torch.tensor(re), torch.tensor(im))


@pytest.mark.parametrize("name", ["abs", "sgn"])
def test_complex_abs_and_sgn_match_eager_over_all_magnitudes(name: str) -> None:
    """eager's std::abs is a hypot: no overflow at 3e20 + 4e20j, no underflow at
    3e-40 + 4e-40j, inf with a NaN part; a plain sqrt(re^2 + im^2) gives inf / 0."""
    fn = getattr(torch, name)
    z = _magnitude_grid()
    exe = _compile_or_refused(fn, [z], name, uses_abs=True)
    if exe is not None:
        (got,) = exe.run([z])
        _same(got, fn(z))


# Real and complex operands with 0, inf, NaN, huge and subnormal parts: eager promotes a
# real operand to x + 0j and multiplies in full (also alpha, 1 for a plain add), so the
# 0 * inf terms give NaN: 2 * (1 + inf j) is nan + inf j, (1 + 1j) + (inf + 1j) is
# inf + nan j; a real divisor goes through c10's complex division (times 1 / c).
MIXED = {
    "real_times_complex": lambda r, z, w: r * z, "complex_times_real": lambda r, z, w: z * r,
    "times_scalar": lambda r, z, w: z * 2.0, "scalar_times": lambda r, z, w: 2.0 * z,
    "div_real": lambda r, z, w: z / r, "div_scalar": lambda r, z, w: z / -3.0,
    "div_zero": lambda r, z, w: z / 0.0, "add_real": lambda r, z, w: z + r,
    "real_sub": lambda r, z, w: r - z, "add": lambda r, z, w: z + w,
    "sub": lambda r, z, w: z - w, "add_alpha": lambda r, z, w: torch.add(z, w, alpha=2),
    "sub_alpha_j": lambda r, z, w: torch.sub(z, w, alpha=1j), "add_inf": lambda r, z, w: z + 1e39,
    "rsub": lambda r, z, w: 1 - z, "mul": lambda r, z, w: z * w,
}


def test_mixed_real_complex_arithmetic_gives_eagers_bits_with_infinities() -> None:
    vals = [0.0, -0.0, 1.0, -2.5, float("inf"), -float("inf"), float("nan"), 3e38, 1e-40]
    z = torch.tensor([complex(a, b) for a, b in itertools.product(vals, vals)])
    r = torch.tensor(vals).repeat_interleave(len(vals)).roll(3)
    w = z.roll(5)
    for name, fn in MIXED.items():
        (got,) = compile_graph(fn, [r, z, w], name=name).run([r, z, w])
        _same(got, fn(r, z, w))
