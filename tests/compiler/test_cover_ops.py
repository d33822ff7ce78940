"""OpInfo ops that were refused by the compiler and now compile (issue 7 coverage).

Each op runs its own OpInfo samples through ``tools/lowering_coverage.py``'s check: eager
CPU is the reference, the compiled executable must match it on every sample (no refusal,
no mismatch, no run error), and the compiler's stats count no failure. Three ops whose
every sample is a compile of its own take a spread of their samples here (``SAMPLES``:
about 4 minutes of the suite otherwise); ``python tools/lowering_coverage.py --only NAME``
runs them all.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

import torchneuron.compiler as tc

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import lowering_coverage  # noqa: E402

# (special.bessel_j0/j1/y0/y1, airy_ai and zeta compiled here within tolerance, not with
# eager's bits, which differ between CPU code paths: refused now, test_math_refused.py)
NOW_COMPILED = ["resize_", "resize_as_", "nn.functional.embedding_bag",
                pytest.param("grid_sampler_3d", marks=pytest.mark.slow),
                pytest.param("nn.functional.grid_sample", marks=pytest.mark.slow)]
# grid_sampler_3d's samples are 5 shapes in each of 6 (mode, padding, align_corners)
# configurations: the (2, 3, 5, 20, 20) input in every configuration.
SAMPLES = {"grid_sampler_3d": slice(1, None, 5),
           "nn.functional.grid_sample": slice(None, None, 3)}


class _SomeSamples:
    """An OpInfo that yields ``samples`` of its samples (the rest of it unchanged)."""

    def __init__(self, op: object, samples: slice) -> None:
        self._op, self._samples = op, samples

    def __getattr__(self, name: str) -> object:
        return getattr(self._op, name)

    def sample_inputs(self, *args: object, **kwargs: object) -> list:
        return list(self._op.sample_inputs(*args, **kwargs))[self._samples]


def _op(name: str) -> object:
    from torch.testing._internal.common_methods_invocations import op_db

    (op,) = [o for o in op_db if o.name == name and not o.variant_test_name]
    return op


@pytest.mark.parametrize("name", NOW_COMPILED)
def test_every_sample_compiles_to_eagers_numbers(name: str, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    import torch.testing._internal.common_methods_invocations as cmi

    # as the sweep does: OpInfo's reseeding wrapper off, the sweep seeds both runs
    monkeypatch.setattr(cmi, "wrapper_set_seed", lambda f, *a, **k: f(*a, **k))
    tc.reset_stats()
    result = lowering_coverage.run_op(_SomeSamples(_op(name), SAMPLES.get(name, slice(None))), 0)
    assert result["status"] == "pass", result
    assert result["samples"].get("pass", 0) > 0, result
    assert tc.stats()["failures"] == 0, tc.stats()


def test_growing_resize_stays_refused() -> None:
    """Grown elements are uninitialised memory eagerly: no compiled number to give."""
    from torchneuron.compiler import compile_graph
    from torchneuron.compiler.errors import CompileError

    with pytest.raises(CompileError):
        compile_graph(lambda x: torch.ops.aten.resize(x, [4, 4]), [torch.randn(3, 3)])


def _wide_range(dtype: torch.dtype) -> torch.Tensor:
    """Every branch of the Cephes kernels: |x| from 1e-8 to 1e4 both signs, the branch
    points, 0, -0, +-inf, NaN, and dense samples where the phases are large."""
    g = torch.Generator().manual_seed(0)
    edges = [0.0, -0.0, math.inf, -math.inf, math.nan, 5.0, -5.0, 1e-5, 2.09, -2.09,
             8.3203353, 103.892, 104.0, 1e30, -1e30, 3.0e38]
    return torch.cat([torch.linspace(-30, 30, 6001, dtype=dtype),
                      torch.logspace(-8, 4, 2001, dtype=dtype),
                      -torch.logspace(-8, 4, 2001, dtype=dtype),
                      torch.randn(3000, generator=g, dtype=dtype) * 3e3,
                      torch.tensor(edges, dtype=dtype)])


@pytest.mark.parametrize("name", ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1",
                                  "airy_ai"])
def test_bessel_and_airy_give_eagers_bits_over_a_wide_range(name: str) -> None:
    """Refused (eager's float32 bits differ between CPU code paths): torch.compile runs
    eager's kernel, so even large |x|, where the float32 phase has lost digits, is eager's."""
    fn = getattr(torch.special, name)
    x = _wide_range(torch.float32)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(x.to("neuron")).cpu()
    want = fn(x)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~want.isnan()], want[~want.isnan()])


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("padding", [0, 1, 2])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sampler_3d_far_outside_and_nan_is_eagers(mode: int, padding: int, align: bool
                                                       ) -> None:
    """Coordinates far outside [-1, 1] (several reflections), on the corners, NaN and inf."""
    from tests.compiler.compiled import assert_compiles_to_eager

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 6, generator=g)
    grid = torch.randn(2, 3, 4, 5, 3, generator=g) * 3
    grid[0, 0, 0, 0, 0] = math.nan
    grid[1, 1, 1, 1, 2] = math.inf
    grid[0, 1, 1, 1] = torch.tensor([1.0, -1.0, 1.0])
    assert_compiles_to_eager(
        lambda a, b: torch.ops.aten.grid_sampler_3d(a, b, mode, padding, align), [x, grid],
        rtol=1e-5, atol=1e-6, equal_nan=True)


def _bag_weight() -> torch.Tensor:
    w = torch.randn(10, 4, generator=torch.Generator().manual_seed(0))
    w[3, 1], w[7, 2] = math.nan, math.inf  # max: a NaN first row stays, a later one never wins
    w[5] = w[6]  # ties keep the earlier row's index
    w[8], w[9] = -0.0, 0.0
    return w


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding_idx", [-1, 3])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_all_outputs_are_eagers(mode: int, padding_idx: int,
                                              include_last_offset: bool) -> None:
    """Every output of ``_embedding_bag`` (offset2bag, bag_size, max_indices too), with
    an empty bag and, with include_last_offset, indices past the last offset."""
    from tests.compiler.compiled import assert_compiles_to_eager

    idx = torch.tensor([1, 3, 5, 6, 2, 9, 8, 7, 7, 4, 3, 5])
    offsets = torch.tensor([0, 3, 3, 7])

    def fn(w: torch.Tensor, i: torch.Tensor, o: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.ops.aten._embedding_bag(w, i, o, False, mode, False, None,
                                             include_last_offset, padding_idx)

    assert_compiles_to_eager(fn, [_bag_weight(), idx, offsets], rtol=1e-6, atol=1e-6,
                             equal_nan=True)


def test_embedding_bag_per_sample_weights_match_eager() -> None:
    from tests.compiler.compiled import assert_compiles_to_eager

    idx = torch.tensor([1, 3, 5, 6, 2, 9, 8, 4])
    psw = torch.rand(8, generator=torch.Generator().manual_seed(1))
    w = torch.randn(10, 4, generator=torch.Generator().manual_seed(2))
    assert_compiles_to_eager(
        lambda a, i, o, p: torch.nn.functional.embedding_bag(i, a, o, mode="sum",
                                                             per_sample_weights=p),
        [w, idx, torch.tensor([0, 2, 2, 5]), psw], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", ["index-high", "index-negative", "first-offset",
                                  "last-offset"])
def test_embedding_bag_out_of_range_raises_like_eager(case: str) -> None:
    """Eager raises a RuntimeError; the compiled graph must not hand back clamped rows."""
    from torchneuron.compiler import compile_graph

    idx, offsets = torch.tensor([0, 2, 4, 1]), torch.tensor([0, 2])
    if case == "index-high":
        idx = torch.tensor([0, 12, 4, 1])
    elif case == "index-negative":
        idx = torch.tensor([0, 2, -1, 1])
    elif case == "first-offset":
        offsets = torch.tensor([1, 2])
    else:
        offsets = torch.tensor([0, 5])
    w = torch.randn(10, 3)

    def fn(a: torch.Tensor, i: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding_bag(i, a, o, mode="max")

    with pytest.raises(RuntimeError):
        fn(w, idx, offsets)
    exe = compile_graph(fn, [w, torch.tensor([0, 2, 4, 1]), torch.tensor([0, 2])])
    with pytest.raises(RuntimeError):
        exe.run([w, idx, offsets])


@pytest.mark.parametrize("fn", [torch.special.bessel_j0, torch.special.bessel_j1,
                                torch.special.bessel_y0, torch.special.bessel_y1,
                                torch.special.airy_ai])
def test_half_bessel_is_refused_and_raises_eagers_error(fn: object) -> None:
    """ATen has no half kernel for these (NotImplementedError on CPU); in half the
    rational coefficients overflow to NaN, so the graph must not be lowered."""
    torch._dynamo.reset()
    x = torch.tensor([1.0, 2.5, -3.0], dtype=torch.float16)
    with pytest.raises(NotImplementedError) as eager:
        fn(x)  # type: ignore[operator]
    with pytest.raises(NotImplementedError) as compiled:
        torch.compile(fn, backend="neuron")(x.to("neuron"))
    assert str(compiled.value) == str(eager.value)
