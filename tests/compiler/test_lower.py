"""lower: prepared graphs -> StableHLO text; Torch-MLIR failures -> LoweringError."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

pytest.importorskip("torch_mlir")

from torchneuron.compiler.errors import LoweringError  # noqa: E402
from torchneuron.compiler.lower import lower_to_stablehlo, parse_failed_op  # noqa: E402
from torchneuron.compiler.prepare import prepare  # noqa: E402


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
    pg = prepare(make_fx(_mlp_step)(*MLP_ARGS), MLP_ARGS, already_aten=True)
    results = shlo.interpret(shlo.parse_module(lower_to_stablehlo(pg.gm)), MLP_ARGS)
    for got, ref in zip(pg.assemble_outputs(MLP_ARGS, results), _mlp_step(*MLP_ARGS), strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_large_constants_are_printed_in_full() -> None:
    w = torch.randn(64, 64)
    pg = prepare(lambda x: x @ w, [torch.randn(2, 64)])
    text = lower_to_stablehlo(pg.gm)
    assert "elided" not in text and len(text) > 64 * 64 * 8  # hex blob of every float


def test_unlowerable_op_raises_lowering_error_naming_it() -> None:
    pg = prepare(lambda x: torch.special.airy_ai(x), [torch.rand(3)])
    with pytest.raises(LoweringError) as info:
        lower_to_stablehlo(pg.gm)
    assert info.value.op == "aten.special_airy_ai" and info.value.reason == "no-lowering"
    assert info.value.stage == "lower" and "decomposition" in str(info.value)


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


def _reused_id_tensor(gone: int) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
    """A new tensor that Python placed at the address (``id``) of a dead one, if any."""
    keep = []
    for _ in range(10_000):
        t = torch.ones(3, dtype=torch.uint8)
        if id(t) == gone:
            return t, keep
        keep.append(t)  # held, so the next try gets another address
    return None, keep


def test_literal_tracker_never_reuses_a_dead_tensors_constant() -> None:
    """Torch-MLIR's importer keys imported constants by ``id``; a bool constant goes
    through a temporary uint8 copy, so a later constant at the same address got the first
    one's values (the key gradient of attention landed in the value slot). Ours starts a
    new entry unless the remembered object is the same live object."""
    from torchneuron.compiler.literal_tracker import LiveRefTracker

    tracker = LiveRefTracker()
    first = torch.zeros(3, dtype=torch.uint8)
    tracker.track(first).value = "first's constant"
    assert tracker.track(first).value == "first's constant"  # the same live object: reused
    gone = id(first)
    del first
    second, _keep = _reused_id_tensor(gone)
    if second is None:
        pytest.skip("Python did not reuse the address of the dead tensor")
    assert tracker.track(second).is_empty


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
    model, x = _Masks(8), torch.randn(3, 4)
    gm = make_fx(model)(x)
    results = shlo.interpret(shlo.parse_module(lower_to_stablehlo(gm, [x])), [x])
    torch.testing.assert_close(results[0], model(x))
