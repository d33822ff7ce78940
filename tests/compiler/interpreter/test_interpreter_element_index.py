"""Element gathers and scatters (cross-entropy's target pick and its gradient) run by
their specializations give the generic implementation's bits and eager's.

Why: ``take_elements`` (``torch.take`` at ``clamp(idx) @ strides``) and
``element_scatter``'s in-range path (``index_put_`` / ``index_add_`` at ``idx @
strides`` into a contiguous clone) replace a dozen torch calls on every training step of
a classifier; the cases cover strided operands, int32 indices, repeated positions (the
write and add order), out-of-range indices (clamped by gather, dropped by scatter) and a
single index vector.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from torchneuron.compiler.interpreter import _specialize, load
from torchneuron.compiler.pipeline import compile_graph

aten = torch.ops.aten


def _runs(fn: Callable[..., torch.Tensor], args: list[torch.Tensor],
          monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, torch.Tensor, list[str]]:  # fmt: skip
    """(specialized run, generic run, the callables the specialized run's steps use)."""
    module = compile_graph(fn, args)._module()
    p = load(module)
    fast = p.run(args)[0]
    body = p.block(module.functions[module.entry].body)
    used = [getattr(s.fn, "__name__", "") for s in body.steps]
    with monkeypatch.context() as m:
        m.setattr(_specialize, "SPECIALIZERS", {})
        slow = load(module).run(args)[0]
    return fast, slow, used


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.is_floating_point:
        return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))
    return torch.equal(a, b)


def _values(*shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=g)
    x.view(-1)[:4] = torch.tensor([float("nan"), -0.0, float("inf"), 0.0])
    return x


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_element_gather(strided: bool, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    x = _values(7, 5) if strided else _values(5, 7)
    t = torch.randint(0, 7, (5,), generator=torch.Generator().manual_seed(1)).to(dtype)

    def pick(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return (x.t() if strided else x).gather(1, t[:, None].long())

    fast, slow, used = _runs(pick, [x, t], monkeypatch)
    assert "take_elements" in used
    assert _same_bits(fast, slow) and _same_bits(fast, pick(x, t))


def test_element_gather_clamps_like_the_generic_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Out-of-range start indices are clamped into range (StableHLO's gather)."""
    text = """func.func @main(%x: tensor<3x4xf32>, %i: tensor<6x2xi64>) -> tensor<6xf32> {
  %0 = "stablehlo.gather"(%x, %i) {dimension_numbers = #stablehlo.gather<
      collapsed_slice_dims = [0, 1], start_index_map = [0, 1], index_vector_dim = 1>,
      slice_sizes = array<i64: 1, 1>, indices_are_sorted = false}
      : (tensor<3x4xf32>, tensor<6x2xi64>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}"""
    from torchneuron.compiler.stablehlo import parse_module

    x = _values(3, 4)
    i = torch.tensor([[0, 0], [2, 3], [-1, 2], [5, -7], [1, 9], [3, 4]])
    fast = load(parse_module(text)).run([x, i])[0]
    with monkeypatch.context() as m:
        m.setattr(_specialize, "SPECIALIZERS", {})
        slow = load(parse_module(text)).run([x, i])[0]
    assert _same_bits(fast, slow)
    assert _same_bits(fast, x[i[:, 0].clamp(0, 2), i[:, 1].clamp(0, 3)])


@pytest.mark.parametrize("out_of_range", [False, True])
@pytest.mark.parametrize("strided", [False, True])
def test_element_scatter_replace(out_of_range: bool, strided: bool,
                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Cross-entropy's gradient form (a body returning the update)."""
    g = torch.Generator().manual_seed(0)
    t = torch.randint(0, 7, (5,), generator=g)
    if out_of_range:
        t[2] = 9  # dropped by both paths
    v = _values(5)
    base = _values(7, 5) if strided else _values(5, 7)

    def fn(src: torch.Tensor, i: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (b.t() if strided else b).scatter(1, i[:, None], src[:, None])

    fast, slow, used = _runs(fn, [v, t, base], monkeypatch)
    assert "element_scatter" in used
    assert _same_bits(fast, slow)
    if not out_of_range:
        assert _same_bits(fast, fn(v, t, base))


@pytest.mark.parametrize("accumulate", [False, True])
def test_element_scatter_with_repeated_positions(accumulate: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Many updates to few positions: the order of writes (last wins) and of additions
    decides the bits."""
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 3, (200,), generator=g)
    cols = torch.randint(0, 2, (200,), generator=g)
    v = torch.randn(200, generator=g) * 1e3

    def fn(v: torch.Tensor, r: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.zeros(3, 2).index_put((r, c), v, accumulate=accumulate)

    fast, slow, used = _runs(fn, [v, rows, cols], monkeypatch)
    assert "element_scatter" in used
    assert _same_bits(fast, slow)
    if accumulate:
        torch.testing.assert_close(fast, fn(v, rows, cols))
    else:
        assert _same_bits(fast, fn(v, rows, cols))
