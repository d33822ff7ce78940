"""The IR as data: JSON round trip, exact constants, printing, and typed errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from torchneuron.compiler.interpreter import UnsupportedStableHLOOp, interpret
from torchneuron.compiler.interpreter.interpret import StableHLOExecutionError
from torchneuron.compiler.stablehlo import (
    Module,
    StableHLOParseError,
    TensorType,
    parse_module,
)

SMALL = """
func.func @main(%arg0: tensor<2x3xf32>, %arg1: tensor<3xf32>) -> tensor<2xf32> {
  %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %0 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
  %1 = stablehlo.add %arg0, %0 : tensor<2x3xf32>
  %2 = stablehlo.reduce(%1 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
  return %2 : tensor<2xf32>
}
"""


def test_json_round_trip_is_exact() -> None:
    module = parse_module(SMALL)
    text = json.dumps(module.to_dict(), allow_nan=False)
    again = Module.from_dict(json.loads(text))
    assert again == module
    assert json.dumps(again.to_dict(), allow_nan=False) == text
    fn = again.functions["main"]
    assert fn.args[0] == ("arg0", TensorType((2, 3), "f32"))
    assert [op.name for op in fn.body] == [
        "stablehlo.constant",
        "stablehlo.broadcast_in_dim",
        "stablehlo.add",
        "stablehlo.reduce",
        "func.return",
    ]
    assert fn.body[1].attributes == {"broadcast_dimensions": [1]}


def test_pretty_prints_one_op_per_line() -> None:
    expected = """\
func main(%arg0: f32[2,3], %arg1: f32[3]) -> (f32[2]):
  %cst: f32[] = stablehlo.constant() {value=dense<0.0>:f32[]}
  %0: f32[2,3] = stablehlo.broadcast_in_dim(%arg1) {broadcast_dimensions=[1]}
  %1: f32[2,3] = stablehlo.add(%arg0, %0)
  %2: f32[2] = stablehlo.reduce(%1, %cst) {dimensions=[1]}
    ^(%arg2: f32[], %arg3: f32[]):
      %3: f32[] = stablehlo.add(%arg2, %arg3)
      stablehlo.return(%3)
  func.return(%2)"""
    assert parse_module(SMALL).pretty() == expected


def test_generic_and_pretty_forms_parse_the_same(lower) -> None:
    import torch_mlir.fx as tmfx  # noqa: F401  (lower needs it; skip cleanly if absent)

    text = lower(lambda x: torch.softmax(x, -1).argmax(-1), [torch.randn(3, 5)])
    from torch_mlir import ir
    from torch_mlir._mlir_libs import _stablehlo

    ctx = ir.Context()
    _stablehlo.register_dialect(ctx)
    generic = ir.Module.parse(text, ctx).operation.get_asm(print_generic_op_form=True)
    a, b = parse_module(text), parse_module(generic)
    assert [op.name for op in a.functions["main"].body] == [
        op.name for op in b.functions["main"].body
    ]
    x = torch.randn(3, 5)
    assert torch.equal(interpret(a, [x])[0], interpret(b, [x])[0])


def test_large_constant_survives_bit_exactly(lower, run_json) -> None:
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), 1e-45, 3.4e38, 0.1, -7.5])
    big = torch.cat([special, torch.randn(64 * 48 - special.numel())]).reshape(64, 48)
    text = lower(lambda x: torch.cat([x, big]), [torch.zeros(1, 48)])
    assert "dense_resource" in text  # torch-mlir keeps big tensors as resource blobs
    (out,) = run_json(text, [torch.zeros(1, 48)])
    assert torch.equal(out[1:].view(torch.int32), big.view(torch.int32))


def test_dense_text_forms_bf16_hex_and_splat(run_json) -> None:
    text = """
func.func @main() -> (tensor<3xbf16>, tensor<2xbf16>, tensor<2x2xf32>, tensor<3xi1>, tensor<2xui8>) {
  %0 = stablehlo.constant dense<[1.5, -0.1, 3.0e+38]> : tensor<3xbf16>
  %1 = stablehlo.constant dense<0xFF80> : tensor<2xbf16>
  %2 = stablehlo.constant dense<"0x0000803F000000C00000C07F00000080"> : tensor<2x2xf32>
  %3 = stablehlo.constant dense<[true, false, true]> : tensor<3xi1>
  %4 = stablehlo.constant dense<[7, 255]> : tensor<2xui8>
  return %0, %1, %2, %3, %4 : tensor<3xbf16>, tensor<2xbf16>, tensor<2x2xf32>, tensor<3xi1>, tensor<2xui8>
}"""
    a, b, c, d, e = run_json(text, [])
    assert torch.equal(a, torch.tensor([1.5, -0.1, 3.0e38]).bfloat16())
    assert b.dtype == torch.bfloat16 and b.tolist() == [float("-inf")] * 2
    want_c = torch.tensor([0x3F800000, -0x40000000, 0x7FC00000, -0x80000000], dtype=torch.int32)
    assert torch.equal(c.reshape(-1).view(torch.int32), want_c)
    assert d.tolist() == [True, False, True]
    assert e.dtype == torch.uint8 and e.tolist() == [7, 255]


def test_json_ir_runs_without_torch_mlir(tmp_path) -> None:
    """An executable stores the JSON IR; loading it must not need torch-mlir."""
    path = tmp_path / "prog.json"
    path.write_text(json.dumps(parse_module(SMALL).to_dict()))
    code = f"""
import json, sys, torch
sys.modules["torch_mlir"] = None  # any import of torch_mlir now fails
from torchneuron.compiler.stablehlo import Module
from torchneuron.compiler.interpreter import interpret
m = Module.from_dict(json.loads(open({str(path)!r}).read()))
x, b = torch.ones(2, 3), torch.arange(3.0)
assert interpret(m, [x, b])[0].tolist() == [6.0, 6.0]
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_parse_error_is_typed() -> None:
    with pytest.raises(StableHLOParseError):
        parse_module("func.func @main( this is not mlir")
    with pytest.raises(StableHLOParseError):
        parse_module("module {}")
    bad = SMALL.replace(
        "%1 = stablehlo.add %arg0, %0 : tensor<2x3xf32>",
        "%1 = stablehlo.add %arg0, %arg1 : tensor<2x3xf32>",
    )
    with pytest.raises(StableHLOParseError, match="stablehlo.add") as info:
        parse_module(bad)
    assert info.value.op == "stablehlo.add"


def test_unknown_op_in_ir_raises_typed_error() -> None:
    module = Module.from_dict(json.loads(json.dumps(parse_module(SMALL).to_dict())))
    module.functions["main"].body[2].name = "stablehlo.frobnicate"
    with pytest.raises(UnsupportedStableHLOOp, match="stablehlo.frobnicate") as info:
        interpret(module, [torch.ones(2, 3), torch.ones(3)])
    assert info.value.op == "stablehlo.frobnicate"


def test_wrong_inputs_explain_themselves() -> None:
    module = parse_module(SMALL)
    with pytest.raises(StableHLOExecutionError, match="expects f32"):
        interpret(module, [torch.ones(2, 3, dtype=torch.float64), torch.ones(3)])
    with pytest.raises(StableHLOExecutionError, match="shape"):
        interpret(module, [torch.ones(3, 2), torch.ones(3)])


def test_outputs_never_alias_inputs() -> None:
    text = """
func.func @main(%arg0: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  return %arg0, %arg0 : tensor<3xf32>, tensor<3xf32>
}"""
    x = torch.randn(3)
    a, b = interpret(parse_module(text), [x])
    a.add_(1)
    assert torch.equal(b, x)


def test_interpret_records_no_autograd() -> None:
    x = torch.randn(2, 3, requires_grad=True)
    (out,) = interpret(parse_module(SMALL), [x, torch.randn(3)])
    assert not out.requires_grad


def test_dense_helpers_round_trip() -> None:
    from torchneuron.compiler.stablehlo import dense_to_tensor, splat_dense, tensor_to_dense

    x = torch.randn(3, 4).bfloat16()
    assert torch.equal(dense_to_tensor(tensor_to_dense(x)).view(torch.int16), x.view(torch.int16))
    inf = dense_to_tensor(
        json.loads(json.dumps(splat_dense(float("-inf"), "f32", [2]), allow_nan=False))
    )
    assert inf.tolist() == [float("-inf")] * 2
