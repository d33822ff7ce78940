"""Dead-code elimination and constant folding."""

from __future__ import annotations

import pytest
import torch

from torchneuron.compiler.interpreter import interpret
from torchneuron.compiler.neuronc import compile_module
from torchneuron.compiler.neuronc._ops import is_constant
from torchneuron.compiler.neuronc.constant_fold import MAX_FOLD_BYTES, const_attr
from torchneuron.compiler.stablehlo._dtypes import dense_to_tensor


def test_dce_removes_unused_ops(builder, trn2):
    b = builder()
    x = b.arg((8, 8))
    dead = b.op("exponential", [x])
    b.op("add", [dead, x])  # unused chain: both ops must go
    live = b.op("negate", [x])
    program = compile_module(b.build(live), trn2)
    names = [op.name for op in program.function.body]
    assert names == ["stablehlo.negate", "func.return"]
    assert program.stats["dce_removed"] == 2
    assert program.cost is not None and program.cost.num_ops == 1


def test_dce_keeps_side_effects(builder, trn2):
    b = builder()
    x = b.arg((4,))
    b.op("custom_call", [x], call_target_name="log_something")
    program = compile_module(b.build(x), trn2)
    assert [op.name for op in program.function.body][0] == "stablehlo.custom_call"


def _fold_program(builder):
    b = builder()
    x = b.arg((4, 4))
    one = b.splat(1, (), "i64")
    one_f = b.op("convert", [one], (), "f32")
    ones = b.op("broadcast_in_dim", [one_f], (4, 4), broadcast_dimensions=[])
    table = b.dense(torch.arange(16, dtype=torch.float32).reshape(4, 4))
    shifted = b.op("add", [table, ones])  # non-splat: needs real evaluation
    expo = b.op("exponential", [b.op("negate", [shifted])])
    return b.build(b.op("multiply", [x, expo]), b.op("subtract", [ones, x])), b


def test_constant_fold_splat_chain_becomes_one_splat(builder, trn2):
    module, _ = _fold_program(builder)
    program = compile_module(module, trn2, {"fuse": False})
    consts = [op for op in program.function.body if is_constant(op)]
    splats = [const_attr(op) for op in consts if "splat" in const_attr(op)]
    assert any(s["shape"] == [4, 4] and s["splat"] == 1.0 and s["dtype"] == "f32" for s in splats)
    assert not any(
        op.name in ("stablehlo.convert", "stablehlo.broadcast_in_dim")
        for op in program.function.body
    )
    assert program.stats["folded"] >= 2


def test_constant_fold_values_match_unfolded(builder, trn2):
    module, _ = _fold_program(builder)
    folded = compile_module(module, trn2)
    assert folded.stats["folded"] >= 5  # convert, broadcast, add, negate, exponential
    x = torch.randn(4, 4)
    want = interpret(compile_module(module, trn2, {"constant_fold": False}).module, [x])
    got = interpret(folded.module, [x])
    for w, g in zip(want, got, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    expected = torch.exp(-(torch.arange(16.0).reshape(4, 4) + 1))
    consts = [dense_to_tensor(const_attr(op)) for op in folded.function.body if is_constant(op)]
    assert any(c.shape == (4, 4) and torch.equal(c, expected) for c in consts)


def test_large_broadcast_of_splat_folds_but_large_dense_does_not(builder, trn2):
    b = builder()
    x = b.arg((1024, 1024))
    big = b.op("broadcast_in_dim", [b.splat(2.0, ())], (1024, 1024), broadcast_dimensions=[])
    table = b.dense(torch.arange(1024, dtype=torch.float32))
    wide = b.op("broadcast_in_dim", [table], (1024, 1024), broadcast_dimensions=[1])
    assert 1024 * 1024 * 4 > MAX_FOLD_BYTES
    program = compile_module(b.build(b.op("multiply", [x, big]), b.op("add", [x, wide])), trn2)
    body = program.function.body
    assert sum(op.name == "stablehlo.broadcast_in_dim" for op in body) == 1  # only the dense one
    assert any(
        is_constant(op)
        and const_attr(op).get("splat") == 2.0
        and const_attr(op)["shape"] == [1024, 1024]
        for op in body
    )


@pytest.mark.parametrize("fn", [
    lambda t: torch.signbit(torch.full_like(t, -0.3)),
    lambda t: torch.full_like(t, -0.3).view(torch.int32),
    lambda t: torch.remainder(-0.3, t),
], ids=["signbit", "view-int32", "remainder-negative-scalar"])
def test_folded_bitcast_of_a_splat_keeps_its_bits(fn) -> None:  # noqa: ANN001
    """A bitcast_convert of a splat constant is its bits in the new type, not the splat's
    value: folding it as a reshape made -0.3 viewed as int32 a 0 (and its sign bit,
    which ``remainder`` by a negative scalar reads, False). Compared with eager."""
    from torchneuron.compiler import compile_graph

    t = torch.tensor([-152.5, 3.0, -1.0, 7.0])
    (got,) = compile_graph(fn, [t]).run([t])
    want = fn(t)
    assert got.dtype == want.dtype
    assert torch.equal(got, want), (got, want)
