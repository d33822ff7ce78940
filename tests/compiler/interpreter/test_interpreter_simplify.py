"""Load-time simplification (``interpreter._simplify``): ops that compute nothing are not
run, reshape chains collapse, and the program's results do not change by one bit.

Why: a prepared program runs every training step; the lowering's identity reshapes,
broadcasts, pads and slices each cost a call per run.
"""

from __future__ import annotations

import torch

from torchneuron.compiler.interpreter import _simplify, load
from torchneuron.compiler.stablehlo import parse_module

_TEXT = """func.func @main(%x: tensor<2x3xf32>, %y: tensor<6xf32>) -> (tensor<6xf32>, tensor<2x3xf32>, tensor<3x2xf32>) {
  %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %0 = stablehlo.reshape %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = stablehlo.broadcast_in_dim %0, dims = [0, 1] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = stablehlo.pad %1, %cst, low = [0, 0], high = [0, 0], interior = [0, 0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %3 = stablehlo.slice %2 [0:2, 0:3] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = stablehlo.convert %3 : tensor<2x3xf32>
  %5 = stablehlo.transpose %4, dims = [0, 1] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %6 = stablehlo.reshape %5 : (tensor<2x3xf32>) -> tensor<1x6xf32>
  %7 = stablehlo.reshape %6 : (tensor<1x6xf32>) -> tensor<6x1xf32>
  %8 = stablehlo.reshape %7 : (tensor<6x1xf32>) -> tensor<6xf32>
  %9 = stablehlo.add %8, %y : tensor<6xf32>
  %10 = stablehlo.multiply %5, %5 : tensor<2x3xf32>
  %11 = stablehlo.reshape %y : (tensor<6xf32>) -> tensor<3x2xf32>
  %12 = stablehlo.transpose %11, dims = [1, 0] : (tensor<3x2xf32>) -> tensor<2x3xf32>
  return %9, %10, %11 : tensor<6xf32>, tensor<2x3xf32>, tensor<3x2xf32>
}"""


def test_identity_ops_and_reshape_chains_are_not_run(monkeypatch) -> None:  # noqa: ANN001
    module = parse_module(_TEXT)
    prepared = load(module)
    x, y = torch.randn(2, 3), torch.randn(6)
    got = prepared.run([x, y])
    block = prepared.block(module.functions[module.entry].body)
    # the six identity ops, the two inner reshapes and the dead transpose %12 are gone
    assert [s.op.name for s in block.steps] == [
        "stablehlo.constant", "stablehlo.reshape", "stablehlo.add", "stablehlo.multiply",
        "stablehlo.reshape",
    ]  # fmt: skip
    x_name = module.functions[module.entry].args[0][0]
    assert block.steps[1].operands == (x_name,)  # %8 reads %x directly
    with monkeypatch.context() as m:  # the same program with nothing simplified
        m.setattr(_simplify, "_is_identity", lambda op: False)
        m.setattr(_simplify, "_PURE_SHAPE_OPS", ())
        plain = load(parse_module(_TEXT))
        want = plain.run([x, y])
        assert len(plain.block(plain.entry.body).steps) > len(block.steps)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(got[0], x.reshape(6) + y)
    # an output that is an input unchanged is still a fresh tensor, not the input
    assert got[2].data_ptr() != y.data_ptr()


def test_values_read_inside_regions_are_kept() -> None:
    """A while body reads an outer value by name: that value is not aliased away."""
    text = """func.func @main(%x: tensor<f32>) -> tensor<f32> {
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %c3 = stablehlo.constant dense<3> : tensor<i64>
  %c1 = stablehlo.constant dense<1> : tensor<i64>
  %a = stablehlo.reshape %x : (tensor<f32>) -> tensor<f32>
  %r:2 = stablehlo.while(%i = %c0, %acc = %x) : tensor<i64>, tensor<f32>
    cond {
      %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %n = stablehlo.add %i, %c1 : tensor<i64>
      %s = stablehlo.add %acc, %a : tensor<f32>
      stablehlo.return %n, %s : tensor<i64>, tensor<f32>
    }
  return %r#1 : tensor<f32>
}"""
    (out,) = load(parse_module(text)).run([torch.tensor(2.0)])
    assert out.item() == 8.0


_TIMES_ONE = """func.func @main(%x: tensor<2x3xf32>, %b: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %one = stablehlo.constant dense<1.000000e+00> : tensor<2x3xf32>
  %two = stablehlo.constant dense<2.000000e+00> : tensor<2x3xf32>
  %one3 = stablehlo.constant dense<1.000000e+00> : tensor<3xf32>
  %0 = stablehlo.multiply %x, %one : tensor<2x3xf32>
  %1 = stablehlo.multiply %one3, %b : tensor<3xf32>
  %2 = stablehlo.broadcast_in_dim %1, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
  %3 = stablehlo.add %0, %2 : tensor<2x3xf32>
  %4 = stablehlo.multiply %x, %two : tensor<2x3xf32>
  return %3, %4, %0 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}"""


def test_multiply_by_a_splat_one_is_not_run(monkeypatch) -> None:  # noqa: ANN001
    """``addmm``'s ``x * 1`` is an alias of ``x`` (either side); ``x * 2`` still runs;
    the bits of signed zeros, infinities and NaN are those of the multiply."""
    module = parse_module(_TIMES_ONE)
    prepared = load(module)
    x = torch.tensor([[-0.0, 0.0, float("inf")], [float("-inf"), float("nan"), 1e-40]])
    b = torch.tensor([-0.0, 2.5, -1.0])
    got = prepared.run([x, b])
    block = prepared.block(module.functions[module.entry].body)
    hot = [s.op.name for s in block.steps if s.op.name != "stablehlo.constant"]
    assert hot.count("stablehlo.multiply") == 1  # only x * 2
    with monkeypatch.context() as m:
        m.setattr(_simplify, "_identity_operand", lambda op, operands, producer: None)
        want = load(parse_module(_TIMES_ONE)).run([x, b])
    for a, w in zip(got, want, strict=True):
        assert torch.equal(a.view(torch.int32), w.view(torch.int32))
    assert torch.equal((x * 1.0 + b).view(torch.int32), got[0].view(torch.int32))
    assert got[2].data_ptr() != x.data_ptr()  # an aliased output is still a fresh tensor


_UNTRANSPOSE = """func.func @main(%x: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<3x2x4xf32>, tensor<4x3x2xf32>) {
  %0 = stablehlo.transpose %x, dims = [2, 0, 1] : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %1 = stablehlo.transpose %0, dims = [1, 2, 0] : (tensor<4x2x3xf32>) -> tensor<2x3x4xf32>
  %2 = stablehlo.transpose %0, dims = [2, 1, 0] : (tensor<4x2x3xf32>) -> tensor<3x2x4xf32>
  %3 = stablehlo.transpose %x, dims = [2, 1, 0] : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
  return %1, %2, %3 : tensor<2x3x4xf32>, tensor<3x2x4xf32>, tensor<4x3x2xf32>
}"""


def test_a_transpose_undoing_a_transpose_is_not_run(monkeypatch) -> None:  # noqa: ANN001
    """``%1`` undoes ``%0``: an alias of ``%x``; ``%2`` composes to another permutation
    and still runs; the values are those of the op-by-op run and of torch."""
    module = parse_module(_UNTRANSPOSE)
    prepared = load(module)
    x = torch.randn(2, 3, 4)
    got = prepared.run([x])
    block = prepared.block(module.functions[module.entry].body)
    assert [s.op.name for s in block.steps].count("stablehlo.transpose") == 3  # %0, %2, %3
    with monkeypatch.context() as m:
        m.setattr(_simplify, "_untranspose", lambda op, operands, producer: None)
        want = load(parse_module(_UNTRANSPOSE)).run([x])
    for a, w in zip(got, want, strict=True):
        assert torch.equal(a, w)
    assert torch.equal(got[0], x) and got[0].data_ptr() != x.data_ptr()
    assert torch.equal(got[1], x.permute(2, 0, 1).permute(2, 1, 0))


_RESHAPE_BACK = """func.func @main(%x: tensor<6xf32>) -> (tensor<6xf32>, tensor<3x2xf32>) {
  %0 = stablehlo.reshape %x : (tensor<6xf32>) -> tensor<1x6xf32>
  %1 = stablehlo.reshape %0 : (tensor<1x6xf32>) -> tensor<6xf32>
  %2 = stablehlo.add %1, %1 : tensor<6xf32>
  %3 = stablehlo.reshape %0 : (tensor<1x6xf32>) -> tensor<3x2xf32>
  return %2, %3 : tensor<6xf32>, tensor<3x2xf32>
}"""


def test_a_reshape_back_to_the_original_shape_is_not_run() -> None:
    """``reshape(reshape(x))`` with ``x``'s own shape is ``x``; one to another shape runs."""
    module = parse_module(_RESHAPE_BACK)
    prepared = load(module)
    x = torch.randn(6)
    got = prepared.run([x])
    block = prepared.block(module.functions[module.entry].body)
    assert [s.op.name for s in block.steps] == ["stablehlo.add", "stablehlo.reshape"]
    assert block.steps[0].operands == (module.functions[module.entry].args[0][0],) * 2
    assert torch.equal(got[0], x + x) and torch.equal(got[1], x.reshape(3, 2))
