"""prepare: functionalization + write-backs, random-op lifting, our decompositions.

Every check compares with plain eager CPU PyTorch.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchneuron.compiler.decomp import dropout, pool_windows, reductions, views
from torchneuron.compiler.decomp import elementwise as E
from torchneuron.compiler.decomp import polynomials as P
from torchneuron.compiler.decomp import scans as S
from torchneuron.compiler.decomp import special as DS
from torchneuron.compiler.decomp import table as D
from torchneuron.compiler.errors import PrepareError
from torchneuron.compiler.prepare.graph import prepare
from torchneuron.compiler.prepare.random_ops import (
    RandomInputSpec,
    draw_random_inputs,
    is_random_op,
)

aten = torch.ops.aten


def _targets(gm: torch.fx.GraphModule) -> list[object]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_inplace_function_becomes_functional_with_write_back() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        y.mul_(3)
        return x * 2

    x, y = torch.randn(3, 4), torch.randn(4)
    pg = prepare(f, [x.clone(), y.clone()])
    assert not any(t._schema.is_mutable for t in _targets(pg.gm))  # type: ignore[attr-defined]
    assert sorted(i for _, i in pg.write_backs) == [0, 1]
    assert pg.num_user_inputs == 2 and pg.num_user_outputs == 1
    xe, ye = x.clone(), y.clone()
    ref = f(xe, ye)
    xc, yc = x.clone(), y.clone()
    got = pg.run_reference([xc, yc])
    assert torch.equal(got, ref) and torch.equal(xc, xe) and torch.equal(yc, ye)


def test_outputs_aliasing_inputs_scalars_and_nones_are_described() -> None:
    def f(x: torch.Tensor) -> tuple[object, ...]:
        x.add_(1)
        return x.view(-1)[2:], x, 3, None

    x = torch.randn(3, 4)
    pg = prepare(f, [x.clone()])
    kinds = [u.kind for u in pg.user_outputs]
    assert kinds == ["tensor", "tensor", "scalar", "none"]
    assert pg.user_outputs[0].alias_input == 0 and pg.user_outputs[0].view == ((10,), (1,), 2)
    assert pg.user_outputs[1].alias_input == 0 and pg.user_outputs[1].view is None
    xc = x.clone()
    view, same, three, none = pg.run_reference([xc])
    assert same is xc and view._base is xc and three == 3 and none is None
    assert torch.equal(xc, x + 1)


def test_graph_text_is_readable() -> None:
    pg = prepare(lambda a, b: (a @ b).relu(), [torch.randn(2, 3), torch.randn(3, 4)])
    assert "aten.mm.default(%arg0_1, %arg1_1)" in pg.graph_text
    assert "float32[2, 4]" in pg.graph_text


def test_dynamic_shape_op_is_a_typed_error() -> None:
    with pytest.raises(PrepareError) as info:
        prepare(lambda x: torch.nonzero(x), [torch.randn(5)])
    assert info.value.reason == "dynamic-output-shape" and info.value.stage == "prepare"


def _random_program(x: torch.Tensor) -> torch.Tensor:
    y = torch.nn.functional.dropout(x, 0.3)
    y = y + torch.rand(x.shape[1])
    y = y * torch.randn(3, x.shape[1]).sum(0)
    y = y + torch.bernoulli(torch.empty_like(x), 0.25)
    y = y + torch.rand_like(x) + torch.randint(0, 5, (x.shape[1],)).float()
    return y + torch.ops.aten.native_dropout(x, 0.5, True)[0]


@pytest.mark.parametrize("seed", [0, 7])
def test_random_ops_draw_bitwise_what_eager_draws(seed: int) -> None:
    x = torch.randn(4, 8)
    pg = prepare(_random_program, [x])
    assert not any(is_random_op(t) for t in _targets(pg.gm))
    assert len(pg.random_inputs) == 7
    specs = [RandomInputSpec.from_dict(json.loads(json.dumps(s.to_dict()))) for s in pg.random_inputs]
    torch.manual_seed(seed)
    ref = _random_program(x)
    torch.manual_seed(seed)
    draws = draw_random_inputs(specs)
    (got,) = pg.gm(x, *draws)
    assert torch.equal(got, ref)
    after_ref = torch.rand(3)  # the generator ends in the same state too
    torch.manual_seed(seed)
    pg.run_reference([x])
    assert torch.equal(torch.rand(3), after_ref)


def test_generator_context_is_entered_once_around_all_draws() -> None:
    pg = prepare(lambda x: x + torch.rand(3) + torch.randn(3), [torch.zeros(3)])
    entered: list[int] = []

    class Ctx:
        def __enter__(self) -> None:
            entered.append(1)
            torch.manual_seed(5)

        def __exit__(self, *exc: object) -> None:
            pass

    draws = draw_random_inputs(pg.random_inputs, Ctx)
    torch.manual_seed(5)
    assert entered == [1] and torch.equal(draws[0], torch.rand(3))


def test_random_op_reading_computed_tensor_values_is_rejected() -> None:
    with pytest.raises(PrepareError) as info:
        prepare(lambda p: torch.bernoulli(p.sqrt()), [torch.rand(4)])
    assert info.value.reason == "random-op-with-tensor-values"
    assert info.value.op == "aten.bernoulli.default"


@pytest.mark.parametrize("args", [
    ((3, 3), (2, 2), (1, 1), (1, 1), False),
    ((2, 2), (), (0, 0), (1, 1), True),
    ((3, 2), (2, 1), (1, 0), (2, 1), True),
])
def test_max_pool2d_with_indices_decomposition(args: tuple[object, ...]) -> None:
    x = torch.randn(2, 3, 9, 11)
    ref_out, ref_idx = aten.max_pool2d_with_indices(x, *args)
    out, idx = pool_windows.max_pool2d_with_indices(x, *args)
    assert torch.equal(out, ref_out) and torch.equal(idx, ref_idx)
    g = torch.randn_like(ref_out)
    ref_gi = aten.max_pool2d_with_indices_backward(g, x, *args, ref_idx)
    torch.testing.assert_close(pool_windows.max_pool2d_with_indices_backward(g, x, *args, ref_idx), ref_gi)


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5])
def test_native_dropout_decomposition_is_bitwise(p: float) -> None:
    x = torch.randn(5, 7)
    torch.manual_seed(3)
    ref = aten.native_dropout(x, p, True)
    torch.manual_seed(3)
    got = dropout.native_dropout(x, p, True)
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    assert got[1].dtype == torch.bool


def test_math_decompositions_match() -> None:
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    torch.testing.assert_close(E.hypot(a, b), torch.hypot(a, b))
    big = torch.tensor([[1000.0, 1000.0], [-float("inf"), -float("inf")]])
    torch.testing.assert_close(reductions.logsumexp(big, [1]), torch.logsumexp(big, 1))
    torch.testing.assert_close(reductions.logsumexp(a, [0, 1], True), torch.logsumexp(a, [0, 1], True))
    e = dropout.empty_permuted([2, 3], [1, 0], dtype=torch.float32)
    assert e.shape == (2, 3) and e.dtype == torch.float32


def test_aot_style_graph_is_accepted_without_example_inputs() -> None:
    def step(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        w = w.detach().requires_grad_()
        loss = torch.nn.functional.max_pool2d(x * w, 2).sum()
        return (loss, *torch.autograd.grad(loss, [w]))

    args = [torch.randn(1, 2, 4, 4), torch.randn(1, 2, 4, 4)]
    joint = make_fx(step, tracing_mode="fake")(*args)
    pg = prepare(joint, None, already_aten=True)
    targets = _targets(pg.gm)
    assert aten.max_pool2d_with_indices.default not in targets
    assert aten.max_pool2d_with_indices_backward.default not in targets
    got = pg.run_reference(args)
    for g, r in zip(got, step(*args), strict=True):
        torch.testing.assert_close(g, r)


def test_random_ops_are_never_decomposed() -> None:
    table = D.decomposition_table()
    for op in (aten.bernoulli.p, aten.uniform.default, aten.rand_like.default, aten.randn.default):
        assert op not in table
    assert table[aten.native_dropout.default] is dropout.native_dropout


_SPECIAL = [
    ("lgamma", DS.lgamma, torch.lgamma),
    ("digamma", DS.digamma, torch.digamma),
    ("polygamma2", lambda x: DS.polygamma(2, x), lambda x: torch.polygamma(2, x)),
    ("erfinv", lambda x: DS.erfinv(torch.tanh(x)), lambda x: torch.erfinv(torch.tanh(x))),
    ("i0", lambda x: DS._bessel_i(x, 0, False), torch.i0),
    ("i1e", lambda x: DS._bessel_i(x, 1, True), torch.special.i1e),
    ("log_ndtr", DS.log_ndtr, torch.special.log_ndtr),
    ("cheb_u", lambda x: P._cheb(x, 5.0, "u"), lambda x: torch.special.chebyshev_polynomial_u(x, 5)),
    ("cumprod", lambda x: S._scan_cumprod(x.reshape(3, -1), 1), lambda x: torch.cumprod(x.reshape(3, -1), 1)),
]


@pytest.mark.parametrize("name,ours,ref", _SPECIAL, ids=[s[0] for s in _SPECIAL])
def test_special_function_decompositions(name: str, ours: object, ref: object) -> None:
    x = torch.linspace(-7.3, 7.3, 147)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-3, atol=1e-4, equal_nan=True)  # type: ignore[operator]


def test_pooling_decompositions_avg_and_unfold() -> None:
    x = torch.randn(2, 3, 9, 11)
    for args in [((3, 3), (2, 2), (1, 1), False, True, None), ((3, 2), (2, 1), (1, 0), True, False, None)]:
        torch.testing.assert_close(pool_windows.avg_pool2d(x, *args), aten.avg_pool2d(x, *args))
    assert torch.equal(views.unfold(x, 3, 3, 2), x.unfold(3, 3, 2))


def test_batch_norm_running_stats_become_write_backs() -> None:
    """native_batch_norm's schema hides its running-stat mutation; it must not be lost."""

    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, rm: torch.Tensor, rv: torch.Tensor):
        return torch.nn.functional.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1)

    args = [torch.randn(2, 3, 4, 4), torch.randn(3), torch.randn(3), torch.zeros(3), torch.ones(3)]
    pg = prepare(f, [a.clone() for a in args])
    assert sorted(i for _, i in pg.write_backs) == [3, 4]
    mine, ref_args = [a.clone() for a in args], [a.clone() for a in args]
    torch.testing.assert_close(pg.run_reference(mine), f(*ref_args))
    for got, ref in zip(mine, ref_args, strict=True):
        torch.testing.assert_close(got, ref)


def test_reductions_of_0d_tensors_are_folded() -> None:
    """torch-mlir segfaults on `x.sum(dim=0)` for 0-d x; clean-up makes them identities."""
    x = torch.tensor(2.5)
    pg = prepare(lambda t: (t.sum(0), t.amax(-1, True), t.any(0)), [x])
    assert not {aten.sum.dim_IntList, aten.amax.default, aten.any.dim} & set(_targets(pg.gm))
    got = pg.run_reference([x])
    assert got[0] == 2.5 and got[1] == 2.5 and got[2].dtype == torch.bool and bool(got[2])
