"""Load-time specializations (``interpreter._specialize``) compute what the generic op
implementations compute, bit for bit, including their edge cases (ties, signed zeros,
NaN windows, out-of-range scatter indices), and are actually used.

Why: an executable's ops are resolved to specialized callables when it is prepared;
a specialization that drifted from the generic semantics would silently change every
compiled program's numbers.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchneuron.compiler.interpreter import _specialize, load
from torchneuron.compiler.stablehlo import parse_module

_MAX_WITH_INDEX = """func.func @main(%x: tensor<4x5x3xf32>, %ix: tensor<4x5x3xi64>)
    -> (tensor<4xf32>, tensor<4xi64>) {
  %init = stablehlo.constant dense<INIT> : tensor<f32>
  %i0 = stablehlo.constant dense<7> : tensor<i64>
  %r:2 = stablehlo.reduce(%x init: %init), (%ix init: %i0) across dimensions = [2, 1]
      : (tensor<4x5x3xf32>, tensor<4x5x3xi64>, tensor<f32>, tensor<i64>)
      -> (tensor<4xf32>, tensor<4xi64>)
    reducer(%a: tensor<f32>, %b: tensor<f32>) (%ai: tensor<i64>, %bi: tensor<i64>)  {
      %c = stablehlo.compare GE, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %v = stablehlo.select %c, %a, %b : tensor<i1>, tensor<f32>
      %e = stablehlo.compare EQ, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %m = stablehlo.minimum %ai, %bi : tensor<i64>
      %s = stablehlo.select %c, %ai, %bi : tensor<i1>, tensor<i64>
      %p = stablehlo.select %e, %m, %s : tensor<i1>, tensor<i64>
      stablehlo.return %v, %p : tensor<f32>, tensor<i64>
    }
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xi64>
}"""

_SCATTER_ADD = """func.func @main(%x: tensor<3x4xf32>, %idx: tensor<5x2x2xi64>, %u: tensor<5x2xf32>)
    -> tensor<3x4xf32> {
  %0 = "stablehlo.scatter"(%x, %idx, %u) <{indices_are_sorted = false,
      scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0, 1],
      scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 2>, unique_indices = false}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<3x4xf32>, tensor<5x2x2xi64>, tensor<5x2xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}"""

_CONV = """func.func @main(%x: tensor<2x3x9x9xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<2x4x5x5xf32> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1],
      window = {stride = [2, 2], pad = [[1, 1], [1, 1]], rhs_dilate = [1, 1]}
      {batch_group_count = 1 : i64, feature_group_count = 1 : i64}
      : (tensor<2x3x9x9xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x5x5xf32>
  return %0 : tensor<2x4x5x5xf32>
}"""


def _both(text: str, inputs: list[torch.Tensor], monkeypatch) -> tuple[list, list]:  # noqa: ANN001
    """(specialized, generic) results of the same program on the same inputs."""
    fast = load(parse_module(text)).run(inputs)
    with monkeypatch.context() as m:
        m.setattr(_specialize, "SPECIALIZERS", {})
        slow = load(parse_module(text)).run(inputs)
    return fast, slow


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.is_floating_point:
        return torch.equal(a.view(torch.int32), b.view(torch.int32))
    return torch.equal(a, b)


def test_specializers_are_used() -> None:
    """Each form above gets its specialized callable, not the generic one."""
    for text, name in ((_MAX_WITH_INDEX.replace("INIT", "0xFF800000"), "max_with_index"),
                       (_SCATTER_ADD, "element_scatter"), (_CONV, "conv_padded")):  # fmt: skip
        module = parse_module(text)
        op = next(o for o in module.functions[module.entry].body if o.name != "stablehlo.constant")
        fn = _specialize.SPECIALIZERS[op.name](op)
        assert fn is not None and fn.__name__ == name


@pytest.mark.parametrize("init", ["0xFF800000", "5.000000e-01", "0x7FC00000"])
@pytest.mark.parametrize("case", ["random", "ties", "signed_zeros", "nan", "neg_inf"])
def test_max_with_first_index_matches_generic_tree(case: str, init: str, monkeypatch) -> None:  # noqa: ANN001
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, 3, generator=g)
    if case == "ties":
        x = torch.randint(0, 3, (4, 5, 3), generator=g).float()
    elif case == "signed_zeros":
        x = torch.where(torch.rand(4, 5, 3, generator=g) < 0.5, -0.0, 0.0)
    elif case == "nan":
        x[1, 2, 0] = float("nan")
        x[3, 0, 1] = float("nan")
    elif case == "neg_inf":
        x[2] = float("-inf")
    # indices that are not an iota, so "smallest index among ties" is exercised
    ix = torch.randperm(60, generator=g).reshape(4, 5, 3)
    fast, slow = _both(_MAX_WITH_INDEX.replace("INIT", init), [x, ix], monkeypatch)
    assert all(_same_bits(a, b) for a, b in zip(fast, slow, strict=True))


def test_max_with_first_index_is_max_pool_with_indices() -> None:
    """On an iota index it is torch's max with first-index tie breaking."""
    x = torch.randint(0, 4, (4, 5, 3)).float()
    # numbered in the order the window is walked (dims [2, 1]: dim 2 first)
    ix = torch.arange(15).reshape(3, 5).t().expand(4, 5, 3).contiguous()
    v, i = load(parse_module(_MAX_WITH_INDEX.replace("INIT", "0xFF800000"))).run([x, ix])
    ref_v, pos = x.permute(0, 2, 1).reshape(4, 15).max(1)
    assert torch.equal(v, ref_v)
    assert torch.equal(i, pos)


def test_max_with_first_index_follows_an_index_input_changed_in_place() -> None:
    """The "indices increase along each window" shortcut is re-checked when the same
    index tensor is written to between runs."""
    prepared = load(parse_module(_MAX_WITH_INDEX.replace("INIT", "0xFF800000")))
    x = torch.zeros(4, 5, 3)  # all tied: the smallest index wins
    ix = torch.arange(15).reshape(3, 5).t().expand(4, 5, 3).contiguous()
    assert prepared.run([x, ix])[1].tolist() == [0, 0, 0, 0]
    ix.mul_(-1)  # now decreasing along the window walk: the last element's index wins
    assert prepared.run([x, ix])[1].tolist() == [-14, -14, -14, -14]


@pytest.mark.parametrize("in_range", [True, False])
def test_scatter_add_matches_generic(in_range: bool, monkeypatch) -> None:  # noqa: ANN001
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4, generator=g)
    idx = torch.stack([torch.randint(0, 3, (5, 2), generator=g),
                       torch.randint(0, 4, (5, 2), generator=g)], dim=-1)  # fmt: skip
    if not in_range:  # out-of-range updates are dropped
        idx[0, 1, 0], idx[3, 0, 1] = 3, -1
    u = torch.randn(5, 2, generator=g)
    fast, slow = _both(_SCATTER_ADD, [x, idx, u], monkeypatch)
    assert _same_bits(fast[0], slow[0])


def test_convolution_with_padding_is_torchs_padded_conv(monkeypatch) -> None:  # noqa: ANN001
    x, w = torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3)
    fast, slow = _both(_CONV, [x, w], monkeypatch)
    assert torch.equal(fast[0], F.conv2d(x, w, stride=2, padding=1))
    torch.testing.assert_close(fast[0], slow[0])


@pytest.mark.parametrize("dims,sa,sb", [
    ("contracting_dims = [0, 1] x [0, 1]", (3, 3), (3, 3)),  # a full contraction
    ("contracting_dims = [1, 0] x [1, 0]", (2, 3), (2, 3)),
    ("contracting_dims = [] x []", (2, 3), (4,)),  # an outer product
    ("contracting_dims = [1] x [0]", (2, 3), (3, 4)),  # the plain matrix product
    ("contracting_dims = [0] x [1]", (3, 2), (4, 3)),
])  # fmt: skip
def test_dot_general_of_2d_operands_matches_generic(dims: str, sa: tuple[int, ...],
                                                    sb: tuple[int, ...], monkeypatch) -> None:  # noqa: ANN001
    """A 2-d operand is a plain matrix only with one free and one contracting dim; the
    other 2-d cases (both dims contracted, none) take the general permute + reshape,
    with the generic path's bits and eager's ``tensordot`` values."""
    def ty(s: tuple[int, ...]) -> str:
        return "tensor<" + "".join(f"{d}x" for d in s) + "f32>"

    lc = [int(d) for d in dims.split("[")[1].split("]")[0].split(",") if d.strip()]
    rc = [int(d) for d in dims.split("[")[2].split("]")[0].split(",") if d.strip()]
    so = tuple(s for i, s in enumerate(sa) if i not in lc) + tuple(
        s for i, s in enumerate(sb) if i not in rc)  # fmt: skip
    text = f"""func.func @main(%a: {ty(sa)}, %b: {ty(sb)}) -> {ty(so)} {{
  %0 = stablehlo.dot_general %a, %b, {dims} : ({ty(sa)}, {ty(sb)}) -> {ty(so)}
  return %0 : {ty(so)}
}}"""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(sa, generator=g), torch.randn(sb, generator=g)
    fast, slow = _both(text, [a, b], monkeypatch)
    assert _same_bits(fast[0], slow[0])
    torch.testing.assert_close(fast[0], torch.tensordot(a, b, dims=(lc, rc)))
