"""lower: prepared graphs -> StableHLO text; Torch-MLIR failures -> LoweringError."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

pytest.importorskip("torch_mlir")

from torchneuron.compiler.errors import LoweringError  # noqa: E402
from torchneuron.compiler.lower.importer import lower_to_stablehlo, parse_failed_op  # noqa: E402
from torchneuron.compiler.prepare.graph import prepare  # noqa: E402


def _mlp_step(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, t: torch.Tensor):
    w1 = w1.detach().requires_grad_()
    w2 = w2.detach().requires_grad_()
    loss = ((torch.relu(x @ w1) @ w2 - t) ** 2).mean()
    return (loss, *torch.autograd.grad(loss, [w1, w2]))


MLP_ARGS = [torch.randn(8, 16), torch.randn(16, 32), torch.randn(32, 4), torch.randn(8, 4)]


def test_mlp_forward_backward_lowers_to_dot_general() -> None:
    pg = prepare(make_fx(_mlp_step)(*MLP_ARGS), MLP_ARGS, already_aten=True)
    text = lower_to_stablehlo(pg.gm, MLP_ARGS)
    assert "func.func @main" in text
    assert text.count("stablehlo.dot_general") >= 4  # 1 per matmul: 2 forward, 3 backward


def test_lowered_mlp_interprets_to_eager_numbers() -> None:
    shlo = pytest.importorskip("torchneuron.compiler.stablehlo")
    interp = pytest.importorskip("torchneuron.compiler.interpreter")
    pg = prepare(make_fx(_mlp_step)(*MLP_ARGS), MLP_ARGS, already_aten=True)
    results = interp.interpret(shlo.parse_module(lower_to_stablehlo(pg.gm)), MLP_ARGS)
    for got, ref in zip(pg.assemble_outputs(MLP_ARGS, results), _mlp_step(*MLP_ARGS), strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_large_constants_are_printed_in_full() -> None:
    w = torch.randn(64, 64)
    pg = prepare(lambda x: x @ w, [torch.randn(2, 64)])
    text = lower_to_stablehlo(pg.gm)
    assert "elided" not in text and len(text) > 64 * 64 * 8  # hex blob of every float


def test_unlowerable_op_raises_lowering_error_naming_it() -> None:
    pg = prepare(lambda x: torch.igamma(x, x), [torch.rand(3)])
    with pytest.raises(LoweringError) as info:
        lower_to_stablehlo(pg.gm)
    assert info.value.op == "aten.igamma" and info.value.reason == "no-lowering"
    # what it means for the user, not where in the compiler a fix would go
    message = str(info.value)
    assert info.value.stage == "lower" and "aten.igamma" in message and "runs eagerly" in message
    assert "compiler/" not in message, message


def test_our_decompositions_make_pooling_and_logsumexp_lower() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.nn.functional.max_pool2d(x, 2)
        return torch.logsumexp(y, 1), torch.hypot(y, y)

    text = lower_to_stablehlo(prepare(f, [torch.randn(2, 3, 8, 8)]).gm)
    assert "stablehlo.maximum" in text or "stablehlo.reduce" in text


def test_parse_failed_op_messages() -> None:
    assert parse_failed_op("failed to legalize operation 'torch.aten.hypot'") == (
        "aten.hypot", "no-lowering")
    assert parse_failed_op("failed to legalize operation 'torch.constant.int'")[1] == (
        "dangling-scalar")
    assert parse_failed_op("something else") == (None, "lowering-failed")


@pytest.mark.parametrize(("case", "blamed"), [
    # no lowering: the op left unconverted after the converted mm
    ("cumprod", "aten.cumprod"),
    # a boolean-mask index_put given straight to Torch-MLIR (prepare refuses it first):
    # its own decomposition fails a size check and leaves a cumprod the graph never had
    ("index_put_mask", None),
])
def test_a_lowering_failure_blames_only_an_op_of_the_graph(case: str, blamed: str | None
                                                           ) -> None:
    """Adaptive eager learns the blamed op and refuses regions holding it from then on,
    so an op Torch-MLIR made up (or the first op of a module it never converted) must not
    be blamed: ``aten.tensor`` was, for the masked loss's backward."""
    aten = torch.ops.aten
    x, mask = torch.randn(4, 4), torch.tensor([True, False, True, False])
    graphs = {
        "cumprod": (lambda a: aten.cumprod(aten.mm(a, a), 1), [x]),
        "index_put_mask": (lambda a, m, v: aten.index_put(aten.mm(a, a), [m], v),
                           [x, mask, torch.randn(2, 4)]),
    }
    f, args = graphs[case]
    with pytest.raises(LoweringError) as info:
        lower_to_stablehlo(make_fx(f)(*args), args)
    assert info.value.op == blamed


def test_literal_tracker_never_hands_a_freed_tensors_constant_to_another() -> None:
    """Torch-MLIR caches constants by id(); bool constants go through a temporary copy, so
    a freed temporary's id came back with the previous constant's data (a wrong constant,
    or a type error when shapes differ). Ours reuses an entry only for the same live object."""
    from torchneuron.compiler.lower.literal_tracker import LiveRefTracker

    tracker = LiveRefTracker()
    for i in range(200):
        mapping = tracker.track(torch.full((4,), i, dtype=torch.uint8))  # freed right after
        assert mapping.is_empty, f"constant {i} was given an earlier constant's entry"
        mapping.value = i


def test_lu_graph_with_many_bool_constants_lowers_in_the_worker() -> None:
    """The LU decomposition holds many same-shape bool masks: through the worker these
    collided before the tracker fix ('torch.vtensor.literal' type mismatch)."""
    from torchneuron.compiler import compile_graph

    a = torch.randn(3, 4, 4)
    for fn in (torch.linalg.lu, torch.linalg.lu_factor_ex, torch.linalg.det):
        got = compile_graph(fn, [a], in_process=False).run([a])
        want = torch.utils._pytree.tree_leaves(fn(a))
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-4)


class _Masks(torch.nn.Module):
    """Bool constants of one shape (as attention's select_backward masks become)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        for i in range(n):
            self.register_buffer(f"m{i}", torch.rand(3, 4, generator=g) > 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for i, m in enumerate(self.buffers()):
            out = out + torch.where(m, x * (i + 1), 0.0)
        return out


def test_bool_constants_lower_to_their_own_values() -> None:
    shlo = pytest.importorskip("torchneuron.compiler.stablehlo")
    interp = pytest.importorskip("torchneuron.compiler.interpreter")
    model, x = _Masks(8), torch.randn(3, 4)
    gm = make_fx(model)(x)
    results = interp.interpret(shlo.parse_module(lower_to_stablehlo(gm, [x])), [x])
    torch.testing.assert_close(results[0], model(x))
