"""FFTs compiled as real DFT matmuls (compiler/decomp_fft.py, complex values as real pairs:
compiler/decomp_complex.py) = eager CPU (pocketfft).

OpInfo's own samples of every torch.fft op and stft compile (a refusal fails the test)
and match eager at the sweep's tolerances; complex graph inputs and outputs cross the
executable boundary as view_as_real pairs; long transforms are refused, other complex
ops are refused with a typed error; torch.compile with autograd compiles both graphs;
adaptive eager gives eager's numbers. Before decomp_fft every FFT graph was refused.
Also: outputs have eager's strides; views of complex inputs/outputs are refused; complex
abs/sgn and mixed real/complex arithmetic match eager at 0, inf, NaN, huge and subnormal
values (the review of issue 7).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

from torchneuron.compiler import CompileError, Executable, compile_graph

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import lowering_coverage  # noqa: E402

RTOL, ATOL = lowering_coverage.RTOL, lowering_coverage.ATOL
FFT_OPS = ["fft.fft", "fft.fft2", "fft.fftn", "fft.ifft", "fft.ifft2", "fft.ifftn", "fft.rfft",
           "fft.rfft2", "fft.rfftn", "fft.irfft", "fft.irfft2", "fft.irfftn", "fft.hfft",
           "fft.hfft2", "fft.hfftn", "fft.ihfft", "fft.ihfft2", "fft.ihfftn", "stft"]


def _assert_close(got: Any, want: Any) -> None:
    got, want = pytree.tree_leaves(got), pytree.tree_leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.dtype, list(g.shape), w.dtype)
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", FFT_OPS)
def test_opinfo_samples_compile_to_eagers_numbers(name: str) -> None:
    from torch.testing._internal.common_methods_invocations import op_db

    (op,) = [o for o in op_db if o.name == name and not o.variant_test_name]
    samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))
    assert samples
    for i, sample in enumerate(samples):
        fn, tensors = lowering_coverage._sample_fn(op, sample)
        want = fn(*[t.clone() for t in tensors])
        exe = compile_graph(fn, [t.clone() for t in tensors], name=f"{name}-{i}")  # refused: fails
        got = exe.run([t.clone() for t in tensors])
        _assert_close(got, want)


def test_complex_inputs_and_outputs_cross_the_boundary_as_pairs() -> None:
    """A complex64 input goes in as f32[..., 2] (8 bytes an element), a complex output
    comes back complex with eager's strides, and the executable round-trips as data."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 5, dtype=torch.complex64, generator=g)
    w = torch.randn(5, generator=g)

    def fn(c: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, ...]:
        spec = torch.fft.fft(c, dim=0, norm="ortho")
        return (spec.mT, (spec * r + 1j).conj(), c.real * 2, torch.fft.irfft(c * r, n=8),
                torch.complex(c.imag, r).abs())

    exe = compile_graph(fn, [z, w])
    sig = exe.signature
    assert sig["complex_inputs"] == [0] and len(sig["complex_outputs"]) == 2
    assert sig["inputs"][0]["shape"] == [3, 5, 2] and sig["inputs"][0]["dtype"] == "torch.float32"
    exe = Executable.from_bytes(exe.to_bytes())  # data only; format 2 carries the fields
    got = exe.run([z, w])
    want = fn(z, w)
    _assert_close(got, want)
    assert got[0].stride() == want[0].stride()


def test_long_transforms_match_eager_up_to_the_bound_and_are_refused_past_it() -> None:
    """One matmul up to 256 points, two stages beyond (1000 = 25 * 40, 4096 = 64 * 64),
    one matmul for a prime length (1021); refused past MAX_FFT_SIZE / MAX_DFT_SIZE."""
    from torchneuron.compiler.decomp.fft import MAX_DFT_SIZE, MAX_FFT_SIZE

    g = torch.Generator().manual_seed(1)
    for n, fn in ((1000, torch.fft.rfft), (1000, torch.fft.fft), (1021, torch.fft.rfft),
                  (4096, torch.fft.fft), (4096, lambda t: torch.fft.irfft(t, n=4096)),
                  (1000, lambda t: torch.fft.hfft(t, n=1000, norm="forward"))):
        x = torch.randn(4, n, generator=g)
        _assert_close(compile_graph(fn, [x]).run([x]), fn(x))
    for n in (2 * MAX_FFT_SIZE, 4099):  # composite past the bound; prime past the bound
        assert n > MAX_DFT_SIZE
        with pytest.raises(CompileError) as e:
            compile_graph(torch.fft.rfft, [torch.randn(2, n, generator=g)])
        assert e.value.reason == "fft-too-large" and e.value.stage == "prepare"


_F = torch.fft
# Complex arithmetic decomp_complex carries as pairs: compiled and equal to eager.
HANDLED = {
    "abs_max": lambda t: _F.fft(t).abs().max(), "div_real": lambda t: _F.fft(t) / (t + 10),
    "mul_complex": lambda t: _F.fft(t) * _F.fft(t.flip(0)), "sub_alpha": lambda t: torch.sub(
        _F.fft(t), _F.ifft(t), alpha=2), "add_scalar": lambda t: _F.fft(t) + (1 + 2j),
    "reshape_t": lambda t: _F.fft(t).reshape(-1, 3).T.contiguous(), "neg": lambda t: -_F.fft(t),
    "fftshift": lambda t: _F.fftshift(_F.fft(t)), "roll": lambda t: torch.roll(_F.fft(t), 2, 1),
    "stack": lambda t: torch.stack([_F.fft(t), _F.ifft(t)]), "cat_real": lambda t: torch.cat(
        [_F.fft(t), t]), "expand": lambda t: _F.rfft(t)[:, None].expand(4, 3, 4) * 2,
    "where": lambda t: torch.where(t > 0, _F.fft(t), 0), "sum_mean": lambda t: (
        _F.fft(t).sum(), _F.fft(t).mean(0)), "power": lambda t: (
        _F.fft(t) * _F.fft(t).conj()).real, "to_real": lambda t: _F.fft(t).to(torch.float32),
    "to_complex128": lambda t: _F.fft(t).to(torch.complex128),
}
# Complex ops it does not handle: refused with a typed error, never a wrong number.
REFUSED = {
    "angle": lambda t: _F.fft(t).angle(), "pow": lambda t: _F.fft(t) ** 2,
    "exp": lambda t: _F.fft(t).exp(), "eq": lambda t: _F.fft(t) == _F.fft(t),
    "div_complex": lambda t: _F.fft(t) / _F.fft(t + 1),
    "norm": lambda t: torch.linalg.norm(_F.fft(t)), "var": lambda t: torch.var(_F.fft(t)),
    "index": lambda t: _F.fft(t)[[0, 2]],
}


@pytest.mark.parametrize("name", sorted(HANDLED))
def test_complex_arithmetic_compiles_to_eagers_numbers(name: str) -> None:
    import warnings

    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager's "casting complex to real discards..."
        want = HANDLED[name](x)
        got = compile_graph(HANDLED[name], [x], name=name).run([x])
    _assert_close(got, want)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_other_complex_ops_are_refused(name: str) -> None:
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(5))
    with pytest.raises(CompileError) as e:
        compile_graph(REFUSED[name], [x], name=name)
    assert e.value.stage == "prepare" and e.value.reason == "complex-op", e.value


def test_real_graphs_do_not_change() -> None:
    """The complex entries hand real values on: the graph of a real program is the
    same as without them (its StableHLO text, hence its cache key and sim time)."""
    import torchneuron.compiler.decomp.complex as decomp_complex
    import torchneuron.compiler.decomp.fft as decomp_fft
    from torchneuron.compiler.prepare.graph import prepare

    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c = torch.sgn(a) * b + a.abs() - a.new_zeros(4, 6) + torch.cat([a, b]).sum() / 3
        d = torch.where(a > 0, -b, 1.0).mean(0) + torch.roll(a, 1, 0)[1, 1:].sum() - a[2:, 3].sum()
        e = torch.nn.functional.pad(a.t(), (1, 2)).unsqueeze(0).expand(2, 6, 7).flip(1)
        return c, d, e.to(torch.float64).reshape(-1)[::3].sum(0, keepdim=True)

    a, b = torch.randn(4, 6), torch.randn(4, 6)
    with_fft = prepare(fn, [a, b]).graph_text
    from torchneuron.compiler.decomp.table import decomposition_table

    tables = (decomp_fft.FFT_DECOMPOSITIONS, decomp_complex.COMPLEX_DECOMPOSITIONS)
    saved = [dict(t) for t in tables]
    try:
        for t in tables:
            t.clear()
        decomposition_table.cache_clear()
        without = prepare(fn, [a, b]).graph_text
    finally:
        for t, entries in zip(tables, saved, strict=True):
            t.update(entries)
        decomposition_table.cache_clear()
    assert with_fft == without


def test_torch_compile_with_autograd_compiles_forward_and_backward() -> None:
    import torchneuron  # noqa: F401
    import torchneuron.compiler as tc

    torch._dynamo.reset()
    tc.reset_stats()
    out, grad, ref, ref_grad = _spectrum_sum_and_grad(
        torch.randn(4, 16, generator=torch.Generator().manual_seed(2)))
    stats = tc.stats()
    assert stats["failures"] == 0 and stats["compilations"] == 2, stats
    torch.testing.assert_close(out, ref, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(grad, ref_grad, rtol=RTOL, atol=ATOL)


def _spectrum_sum_and_grad(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``rfft(x).abs().sum()`` and its gradient, compiled on neuron then eager on CPU."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft(x).abs().sum()

    xd = x.to("neuron").requires_grad_()
    out = torch.compile(f, backend="neuron")(xd)
    out.backward()
    xc = x.clone().requires_grad_()
    ref = f(xc)
    ref.backward()
    return out.cpu(), xd.grad.cpu(), ref, xc.grad


def test_adaptive_eager_loop_of_ffts_gives_eagers_numbers() -> None:
    """rfft / irfft on neuron tensors for 8 steps: eager's numbers whether the region
    replays compiled or is refused (today adaptive eager's capture refuses complex
    values) and runs eagerly; never a replay that differs (verify is on)."""
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
        torch.testing.assert_close(g_, w_, rtol=RTOL, atol=ATOL)


def test_prepared_graph_reference_run_takes_and_gives_complex_values() -> None:
    """``PreparedGraph.run_reference`` (what lowerings are checked against) converts at
    the same boundary as the executable."""
    from torchneuron.compiler.prepare.graph import prepare

    z = torch.randn(3, 4, dtype=torch.complex64, generator=torch.Generator().manual_seed(6))

    def fn(c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.fft.fft(c), c.imag * 2

    prepared = prepare(fn, [z])
    assert prepared.complex_inputs == [0] and prepared.complex_outputs == [0]
    _assert_close(prepared.run_reference([z]), fn(z))


# Outputs that eager returns as views of a complex input or output: the graph
# computes on pairs and could only return copies (which would not follow a later
# in-place write), so these are refused.
REAL_VIEWS_OF_COMPLEX = {
    "view_as_real_of_input": (lambda c: (torch.view_as_real(c), c.abs()), True),
    "real_of_input": (lambda c: c.real, True),
    "imag_of_input": (lambda c: (torch.fft.fft(c), c.imag), True),
    "real_of_output": (lambda t: (lambda f: (f, f.real))(torch.fft.fft(t)), False),
    "imag_of_output": (lambda t: (lambda f: (f, f.real, f.imag))(torch.fft.fft(t)), False),
    "view_as_real_of_output": (lambda t: (lambda f: (f, torch.view_as_real(f)))(
        torch.fft.fft(t)), False),
    # complex views that decomp_complex computes (conj is a copy of the pairs)
    "conj_of_input": (lambda c: c.conj(), True),
    "conj_of_output": (lambda t: (lambda f: (f, f.conj()))(torch.fft.fft(t)), False),
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

    def fn(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = torch.fft.fft(a)
        return f, f.real

    torch._dynamo.reset()
    x = torch.randn(4, 10, generator=torch.Generator().manual_seed(9))
    f, r = torch.compile(fn, backend="neuron")(x.to("neuron"))
    f.mul_(0)
    fe, re_ = fn(x)
    fe.mul_(0)
    torch.testing.assert_close(r.cpu(), re_)


def test_conjugate_and_strided_complex_inputs_are_read_as_their_values() -> None:
    """A conj-bit view (``z.conj()``) and a strided slice go in as the pairs of the values
    they show, as eager reads them."""
    g = torch.Generator().manual_seed(7)
    z = torch.randn(3, 8, dtype=torch.complex64, generator=g)

    def fn(c: torch.Tensor) -> torch.Tensor:
        return torch.fft.fft(c) * 2

    for c in (z.conj(), z[:, 1::2], z.conj()[1:]):
        _assert_close(compile_graph(fn, [c]).run([c]), fn(c))


# Results whose strides eager's kernels choose (pocketfft, TensorIterator), not the
# decomposition's pairs: compiled outputs must have them, and ops inside the graph that
# depend on them (a view) must behave as in eager.
_Z = (4, 10)
LAYOUTS = {
    "fft2_dims_swapped": (lambda z: _F.fft2(z, dim=(-1, -2)), True, _Z),
    "fft2_dims_swapped_view": (lambda z: _F.fft2(z, dim=(-1, -2)).view(-1), True, _Z),
    "irfft_513": (lambda z: _F.irfft(z, n=513), True, (3, 200)),
    "rfftn_dims_10": (lambda t: _F.rfftn(t, dim=(1, 0)), False, _Z),
    "rfft_300_dim0": (lambda t: _F.rfft(t, dim=0, norm="forward"), False, (300, 3)),
    "fft_300_dim0": (lambda t: _F.fft(t, dim=0), False, (300, 3)),
    "rfft2_3d": (lambda t: _F.rfft2(t, dim=(0, 1)), False, (4, 6, 3)),
    "fftn_3d": (lambda z: _F.fftn(z, dim=(2, 0)), True, (3, 4, 5)),
    "fft_size1": (lambda t: _F.fft(t, dim=1), False, (4, 1, 3)),
    "transposed_times_2": (lambda t: _F.fft(t).t() * 2, False, _Z),
    "t_reshape": (lambda t: _F.fft(t).t().reshape(-1) * 2, False, _Z),
    "t_contiguous": (lambda t: _F.fft(t).t().contiguous(), False, _Z),
    "t_clone": (lambda t: _F.fft(t).t().clone(), False, _Z),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_outputs_have_eagers_strides(name: str) -> None:
    fn, is_complex, shape = LAYOUTS[name]
    g = torch.Generator().manual_seed(10)
    x = torch.randn(*shape, dtype=torch.complex64 if is_complex else torch.float32, generator=g)
    want = fn(x)
    (got,) = compile_graph(fn, [x], name=name).run([x])
    _assert_close(got, want)
    assert got.stride() == want.stride()
    assert got.untyped_storage().nbytes() == want.untyped_storage().nbytes()


@pytest.mark.parametrize("name", ["fft2_dims_swapped_view", "t_reshape", "too_long"])
def test_torch_compile_of_fft_layouts_and_long_transforms(name: str) -> None:
    """Compiled, or refused and run eagerly (too long): never a failed torch.compile."""
    import torchneuron  # noqa: F401

    if name == "too_long":
        fn, x = (lambda t: _F.rfft(t).abs()), torch.randn(2, 1 << 15)
    else:
        fn, is_complex, shape = LAYOUTS[name]
        x = torch.randn(*shape, dtype=torch.complex64 if is_complex else torch.float32)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(x.to("neuron")).cpu()
    want = fn(x)
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


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
    import itertools

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
    want = fn(z)
    (got,) = compile_graph(fn, [z], name=name).run([z])
    torch.testing.assert_close(got, want, rtol=2e-7, atol=0, equal_nan=True)


def test_gradient_of_abs_of_large_and_tiny_spectra_matches_eager() -> None:
    """The backward of abs goes through sgn: eager's gradient at 1e20 and 1e-22 scales.
    (Not at subnormal magnitudes: there eager's own complex sgn differs by position, its
    vectorized loop gives z / |z| and its scalar tail z * (1 / |z|), inf + nan j.)"""
    import torchneuron  # noqa: F401

    g = torch.Generator().manual_seed(11)
    for scale in (1e20, 1e-22):
        torch._dynamo.reset()
        out, grad, ref, ref_grad = _spectrum_sum_and_grad(torch.randn(3, 16, generator=g) * scale)
        torch.testing.assert_close(out, ref, rtol=RTOL, atol=0)
        torch.testing.assert_close(grad, ref_grad, rtol=RTOL, atol=ATOL)


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


@pytest.mark.parametrize("name", sorted(MIXED))
def test_mixed_real_complex_arithmetic_matches_eager_with_infinities(name: str) -> None:
    import itertools

    vals = [0.0, -0.0, 1.0, -2.5, float("inf"), -float("inf"), float("nan"), 3e38, 1e-40]
    z = torch.tensor([complex(a, b) for a, b in itertools.product(vals, vals)])
    r = torch.tensor(vals).repeat_interleave(len(vals)).roll(3)
    w = z.roll(5)
    fn = MIXED[name]
    want = fn(r, z, w)
    (got,) = compile_graph(fn, [r, z, w], name=name).run([r, z, w])
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0, equal_nan=True)
