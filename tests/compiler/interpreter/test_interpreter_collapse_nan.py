"""The NaN-override fusion (``interpreter.collapse.nan``): used on max-pooling's lowering, the
op-by-op interpreter's bits and eager PyTorch's results with and without NaNs, and the
op-by-op run for every form whose predicate is not a NaN mask of program constants.

Why: it replaces about twenty-five steps of every compiled max-pooling forward by "no
NaN: the pool's own value and index"; a wrong match would silently drop a NaN (or put
one where eager has none) in every such model.

Also here: the pool with its flat index as ATen's kernel alone
(``interpreter.collapse.pool_flat``), the same bits as the pool and lookup run op by op.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.interpreter.test_interpreter_collapse import _pool_input, _runs, _same_bits

FUSED = "torchneuron.collapsed.nan_override"


def _input(shape: tuple[int, ...], case: str) -> torch.Tensor:
    if case != "both_infs":
        return _pool_input(shape, case)
    x = _pool_input(shape, "ties")  # +inf and -inf: the input's sum is NaN, no element is
    x.view(-1)[4] = float("inf")
    x.view(-1)[9] = float("-inf")
    return x


@pytest.mark.parametrize("case", ["ties", "signed_zeros", "nan", "neg_inf", "both_infs"])
@pytest.mark.parametrize(
    "shape,kw",
    [((2, 3, 8, 8), dict(kernel_size=2, stride=2)),
     ((2, 3, 9, 7), dict(kernel_size=3, stride=2, padding=1)),
     ((1, 2, 6, 9), dict(kernel_size=(2, 3), stride=(1, 2), ceil_mode=True)),
     ((2, 5, 11), dict(kernel_size=3, stride=2))],
)  # fmt: skip
def test_max_pool_nan_override_is_fused_and_exact(shape, kw, case, monkeypatch) -> None:  # noqa: ANN001
    x = _input(shape, case)
    fn = lambda t: F.max_pool2d_with_indices(t, **kw)  # noqa: E731
    fast, slow, fused = _runs(fn, [x], monkeypatch)
    assert FUSED in fused
    assert all(_same_bits(a, b) for a, b in zip(fast, slow, strict=True))
    ref_v, ref_i = fn(x)
    assert _same_bits(fast[0], ref_v)
    assert torch.equal(fast[1], ref_i)


def test_a_nan_arriving_on_a_later_run_is_still_reported(monkeypatch) -> None:  # noqa: ANN001
    """The fast path's check is per run: a prepared program that ran NaN-free first
    still makes a later NaN win its window."""
    from torchneuron.compiler.interpreter import load
    from torchneuron.compiler.pipeline import compile_graph

    fn = lambda t: F.max_pool2d_with_indices(t, 2, 2)  # noqa: E731
    clean = _pool_input((2, 3, 8, 8), "ties")
    prepared = load(compile_graph(fn, [clean])._module())
    for x in (clean, _pool_input((2, 3, 8, 8), "nan"), clean, _input((2, 3, 8, 8), "both_infs")):
        got_v, got_i = prepared.run([x])
        ref_v, ref_i = fn(x)
        assert _same_bits(got_v, ref_v) and torch.equal(got_i, ref_i)


def _override(x: torch.Tensor, a: torch.Tensor, v: torch.Tensor, i: torch.Tensor,
              p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    return torch.where(p, a, v), torch.where(p, i + 1, i)


def test_a_predicate_true_without_nan_runs_the_original_ops(monkeypatch) -> None:  # noqa: ANN001
    """``not isnan(x)`` is a NaN mask's function of the same form, but true where ``x``
    has no NaN: the fast path must not give the third operands."""

    def fn(x: torch.Tensor, v: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _override(x, x * 2, v, i, ~torch.isnan(x))

    x, v = torch.randn(4, 5), torch.randn(4, 5)
    i = torch.arange(20).reshape(4, 5)
    fast, slow, fused = _runs(fn, [x, v, i], monkeypatch)
    if FUSED not in fused:
        pytest.skip("isnan lowers to another form here")
    assert all(_same_bits(a, b) for a, b in zip(fast, slow, strict=True))
    for got, want in zip(fast, fn(x, v, i), strict=True):
        assert _same_bits(got, want)


def test_a_predicate_read_at_run_time_is_not_fused(monkeypatch) -> None:  # noqa: ANN001
    """The predicate also reads an input: not a function of the mask and constants."""

    def fn(x: torch.Tensor, v: torch.Tensor, i: torch.Tensor,
           m: torch.Tensor) -> tuple[torch.Tensor, ...]:  # fmt: skip
        return _override(x, x * 2, v, i, torch.isnan(x) | m)

    x, v = torch.randn(4, 5), torch.randn(4, 5)
    i = torch.arange(20).reshape(4, 5)
    m = torch.rand(4, 5) > 0.5
    fast, slow, fused = _runs(fn, [x, v, i, m], monkeypatch)
    assert FUSED not in fused
    for got, want in zip(fast, fn(x, v, i, m), strict=True):
        assert _same_bits(got, want)


def test_a_predicate_read_elsewhere_is_not_fused(monkeypatch) -> None:  # noqa: ANN001
    """The mask is an output too: the run is not closed, so no fusion."""

    def fn(x: torch.Tensor, v: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p = torch.isnan(x)
        return (*_override(x, x * 2, v, i, p), p)

    x, v = torch.randn(4, 5), torch.randn(4, 5)
    x[1, 2] = float("nan")
    i = torch.arange(20).reshape(4, 5)
    fast, slow, fused = _runs(fn, [x, v, i], monkeypatch)
    assert FUSED not in fused
    for got, want in zip(fast, fn(x, v, i), strict=True):
        assert _same_bits(got, want)


@pytest.mark.parametrize("nan", [False, True])
def test_a_hand_written_override_of_the_same_form_is_exact(nan: bool, monkeypatch) -> None:  # noqa: ANN001
    """``where(isnan(x), ...)`` written by hand: fused or not, the op-by-op bits."""

    def fn(x: torch.Tensor, v: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _override(x, x * 2, v, i, torch.isnan(x))

    x, v = torch.randn(4, 5), torch.randn(4, 5)
    if nan:
        x[1, 2] = float("nan")
    i = torch.arange(20).reshape(4, 5)
    fast, slow, _ = _runs(fn, [x, v, i], monkeypatch)
    assert all(_same_bits(a, b) for a, b in zip(fast, slow, strict=True))
    for got, want in zip(fast, fn(x, v, i), strict=True):
        assert _same_bits(got, want)


@pytest.mark.parametrize("case", ["ties", "nan", "neg_inf", "signed_zeros"])
@pytest.mark.parametrize(
    "shape,kw",
    [((2, 3, 8, 8), dict(kernel_size=2, stride=2)),
     ((2, 3, 9, 7), dict(kernel_size=3, stride=2)),
     ((2, 3, 9, 7), dict(kernel_size=3, stride=2, padding=1)),
     ((2, 5, 11), dict(kernel_size=(2, 3), stride=(1, 2)))],
)  # fmt: skip
def test_max_pool_with_its_flat_index_is_one_kernel_call_and_exact(shape, kw, case,
                                                                  monkeypatch) -> None:  # noqa: ANN001
    """``_fuse_pool_flat``: the pool and the lookup of its flat index as ATen's kernel;
    a padded pool's table points into the unpadded input, so there the two fusions run
    one after the other. Either way: the op-by-op bits and eager's results."""
    x = _input(shape, case)
    fn = lambda t: F.max_pool2d_with_indices(t, **kw)  # noqa: E731
    fast, slow, fused = _runs(fn, [x], monkeypatch)
    assert "torchneuron.collapsed.max_pool_flat" in fused
    assert all(_same_bits(a, b) for a, b in zip(fast, slow, strict=True))
    ref_v, ref_i = fn(x)
    assert _same_bits(fast[0], ref_v)
    assert torch.equal(fast[1], ref_i)
