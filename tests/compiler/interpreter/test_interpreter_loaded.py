"""A prepared program (``interpreter.load``) run many times gives what a fresh
``interpret`` gives, bit for bit, and its cached constants never leak to callers.

Why: executables keep their prepared program across training steps and decode
constants once; a caller that mutates an output (an in-place optimizer update of a
returned tensor) must not change what the next run computes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchneuron.compiler.interpreter import interpret, load
from torchneuron.compiler.stablehlo import parse_module


def test_prepared_runs_match_fresh_interpret_bitwise(lower) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = F.gelu(x @ w + 0.5)
        return F.layer_norm(h, h.shape[-1:]).softmax(-1).sum(0)

    x, w = torch.randn(8, 16), torch.randn(16, 32)
    module = parse_module(lower(f, [x, w]))
    prepared = load(module)
    for _ in range(3):
        x, w = torch.randn(8, 16), torch.randn(16, 32)
        (got,) = prepared.run([x, w])
        (want,) = interpret(module, [x, w])
        assert torch.equal(got, want)
        torch.testing.assert_close(got, f(x, w), rtol=1e-5, atol=1e-5)


def test_cached_constant_output_is_not_shared_with_caller() -> None:
    text = """func.func @main(%arg0: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %c = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %s = stablehlo.add %arg0, %c : tensor<2xf32>
  return %c, %s : tensor<2xf32>, tensor<2xf32>
}"""
    prepared = load(parse_module(text))
    const, total = prepared.run([torch.zeros(2)])
    const.mul_(100)  # the caller owns its outputs
    total.mul_(100)
    const2, total2 = prepared.run([torch.ones(2)])
    assert const2.tolist() == [1.0, 2.0]
    assert total2.tolist() == [2.0, 3.0]


def test_unused_outputs_are_not_computed() -> None:
    """An output the caller takes from its inputs (``Executable``'s aliased user outputs)
    comes back as None, and the ops only it needs are dropped; the others are unchanged."""
    text = """func.func @main(%arg0: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<2x3xf32>) {
  %t = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %s = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>
  return %t, %s : tensor<3x2xf32>, tensor<2x3xf32>
}"""
    module = parse_module(text)
    x = torch.randn(2, 3)
    pruned = load(module, unused_outputs=[0])
    t, s = pruned.run([x])
    assert t is None
    assert torch.equal(s, interpret(module, [x])[1])
    block = pruned.block(pruned.entry.body)
    assert [step.op.name for step in block.steps] == ["stablehlo.add"]
    assert load(module).run([x])[0] is not None


def test_no_output_shares_storage_with_an_input_a_constant_or_another_output() -> None:
    """An input returned as is or as a view, a value returned twice, a view of another
    output and a broadcast constant each come back in storage of their own, on the first
    run and on later ones (which start from the kept constants)."""
    text = """func.func @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<6xf32>,
      tensor<2x3xf32>, tensor<2x3xf32>, tensor<6xf32>, tensor<2x3xf32>) {
  %r = stablehlo.reshape %arg0 : (tensor<2x3xf32>) -> tensor<6xf32>
  %s = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>
  %v = stablehlo.reshape %s : (tensor<2x3xf32>) -> tensor<6xf32>
  %c = stablehlo.constant dense<1.5> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<2x3xf32>
  return %arg0, %r, %s, %s, %v, %b : tensor<2x3xf32>, tensor<6xf32>, tensor<2x3xf32>,
      tensor<2x3xf32>, tensor<6xf32>, tensor<2x3xf32>
}"""
    prepared = load(parse_module(text))
    for _ in range(3):
        x = torch.randn(2, 3)
        outs = prepared.run([x])
        storages = [o.untyped_storage().data_ptr() for o in outs]
        assert len(set(storages)) == len(outs)
        assert x.untyped_storage().data_ptr() not in storages
        assert torch.equal(outs[0], x) and torch.equal(outs[1], x.reshape(6))
        assert torch.equal(outs[4], (x + x).reshape(6))
        for o in outs:
            o.fill_(7.0)  # the caller owns its outputs
        assert torch.equal(outs[5], torch.full((2, 3), 7.0))
    assert torch.equal(prepared.run([torch.zeros(2, 3)])[5], torch.full((2, 3), 1.5))


_VIEWS = """func.func @main(%arg0: tensor<4x3xf32>, %arg1: tensor<i64>) -> (tensor<6xf32>,
    tensor<2x3xf32>, tensor<2x3xf32>, tensor<12xf32>, tensor<2xf32>, tensor<4xf32>,
    tensor<2xf32>) {
  %r = stablehlo.slice %arg0 [1:3, 0:3] : (tensor<4x3xf32>) -> tensor<2x3xf32>
  %rr = stablehlo.reshape %r : (tensor<2x3xf32>) -> tensor<6xf32>
  %s = stablehlo.add %arg0, %arg0 : tensor<4x3xf32>
  %a = stablehlo.slice %s [0:2, 0:3] : (tensor<4x3xf32>) -> tensor<2x3xf32>
  %b = stablehlo.slice %s [2:4, 0:3] : (tensor<4x3xf32>) -> tensor<2x3xf32>
  %v = stablehlo.reshape %s : (tensor<4x3xf32>) -> tensor<12xf32>
  %c = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %cs = stablehlo.slice %c [1:3] : (tensor<4xf32>) -> tensor<2xf32>
  %d = stablehlo.dynamic_slice %c, %arg1, sizes = [2] : (tensor<4xf32>, tensor<i64>) -> tensor<2xf32>
  return %rr, %a, %b, %v, %cs, %c, %d : tensor<6xf32>, tensor<2x3xf32>, tensor<2x3xf32>,
    tensor<12xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>
}"""


@pytest.mark.parametrize("modes", [("inference", "inference"), ("inference", "no_grad"),
                                   ("no_grad", "inference"), ("inference_args", "no_grad")])
def test_outputs_own_their_storage_under_inference_mode(modes: tuple[str, str]) -> None:
    """Views of inference tensors have no ``_base``: under ``torch.inference_mode()`` (or
    with inference tensors as inputs or kept constants) no output may still share storage
    with an input, another output or a kept constant, and writing the outputs must not
    change the next run (eager: slices of ``x + x`` written by the caller, constants not)."""
    prepared = load(parse_module(_VIEWS))
    c = torch.tensor([1.0, 2.0, 3.0, 4.0])
    for mode in (*modes, modes[-1]):
        with torch.inference_mode() if mode.startswith("inference") else torch.no_grad():
            x, i = torch.randn(4, 3), torch.tensor(1)
            x0 = x.clone()
        with torch.inference_mode() if mode == "inference" else torch.no_grad():
            outs = prepared.run([x, i])
            want = [x[1:3].reshape(6), (x + x)[:2], (x + x)[2:], (x + x).reshape(12), c[1:3],
                    c, c[1:3]]  # fmt: skip
            assert all(torch.equal(o, w) for o, w in zip(outs, want, strict=True))
            storages = [o.untyped_storage().data_ptr() for o in outs]
            assert len(set(storages)) == len(outs)
            assert x.untyped_storage().data_ptr() not in storages
            for o in outs:
                o.fill_(-5.0)  # the caller owns its outputs
            assert torch.equal(x, x0)


_LIVENESS = """func.func @main(%x: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %c3 = stablehlo.constant dense<3> : tensor<i64>
  %c1 = stablehlo.constant dense<1> : tensor<i64>
  %a = stablehlo.add %x, %x : tensor<f32>
  %b = stablehlo.multiply %a, %x : tensor<f32>
  %d = stablehlo.add %b, %x : tensor<f32>
  %e = stablehlo.add %d, %d : tensor<f32>
  %r:2 = stablehlo.while(%i = %c0, %acc = %e) : tensor<i64>, tensor<f32>
    cond {
      %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %n = stablehlo.add %i, %c1 : tensor<i64>
      %s = stablehlo.add %acc, %a : tensor<f32>
      stablehlo.return %n, %s : tensor<i64>, tensor<f32>
    }
  return %r#1, %b : tensor<f32>, tensor<f32>
}"""


def test_values_are_released_after_their_last_read_but_not_before() -> None:
    """Each value leaves the run's env after its last reader (so its memory is reused),
    counting a later op's region reading it by name as a read, and never a returned
    value; a hot run (from the kept constants) gives the same results."""
    prepared = load(parse_module(_LIVENESS))
    for v in (2.0, -1.5, 2.0):
        r, b = prepared.run([torch.tensor(v)])
        a = v + v
        e = 2 * (a * v + v)
        assert (r.item(), b.item()) == (e + 3 * a, a * v)
    block = prepared.block(prepared.entry.body)
    steps = [s for s in block.steps if s.op.name != "stablehlo.constant"]
    assert [s.op.name for s in steps[1:]] == ["stablehlo.multiply", "stablehlo.add",
                                             "stablehlo.add", "stablehlo.while"]  # fmt: skip
    (a,), (b,), (d,), (e,) = (s.results for s in steps[:4])
    assert steps[3].drop == (d,)  # d's only reader
    assert {a, e} <= set(steps[4].drop)  # a: read by the while body, after the ops before
    assert not any(b in s.drop for s in steps)  # returned
