"""compiler.rounding: a float32 difference that a float64 run explains is accepted, a
wrong result is not (each compared with the graph run eagerly, never pasted numbers)."""

from __future__ import annotations

import torch
import torch.fx as fx

from torchneuron.compiler.rounding import explained_by_rounding
from torchneuron.compiler.verify import ATOL, RTOL, compare_outputs


def _graph(fn) -> fx.GraphModule:
    return fx.symbolic_trace(fn)


# a fixed shuffle: summed in another order than x itself on every CPU path (a reversal is
# summed in the same order as x by ATen's scalar loop, ATEN_CPU_CAPABILITY=default, and
# cancels to an exact 0 there, leaving no noise to explain)
_SHUFFLE = torch.randperm(4096, generator=torch.Generator().manual_seed(1))


def _cancel(x: torch.Tensor) -> torch.Tensor:
    # zero in exact arithmetic: what is left is summation-order noise, then amplified
    s = (x * 1e4).sum() - (x * 1e4)[_SHUFFLE].sum()
    return s / (s.abs().sqrt() + 1e-12)


def test_reassociated_noise_is_explained() -> None:
    torch.manual_seed(0)
    x = torch.randn(4096)
    gm = _graph(_cancel)
    eager = [gm(x.clone())]
    # the same computation summed in another order (what a compiled graph may do)
    s = (x * 1e4).reshape(64, 64).sum(0).sum() - (x * 1e4)[_SHUFFLE].reshape(64, 64).sum(1).sum()
    got = [s / (s.abs().sqrt() + 1e-12)]
    assert compare_outputs("g", eager, got) is not None or torch.equal(eager[0], got[0])
    assert explained_by_rounding(gm, [x], None, eager + [x], got + [x], RTOL, ATOL)


def test_a_wrong_result_is_not_explained() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(64) * 5, torch.randn(64).sign() * 2
    gm = _graph(lambda a, b: torch.remainder(a, b))
    eager = [gm(a, b)]
    got = [torch.fmod(a, b)]  # the classic wrong lowering of remainder
    assert compare_outputs("g", eager, got) is not None
    assert not explained_by_rounding(gm, [a, b], None, eager + [a, b], got + [a, b], RTOL, ATOL)


def test_a_wrong_in_place_write_is_not_explained() -> None:
    torch.manual_seed(0)
    p, g = torch.randn(32), torch.randn(32)

    def step(p, g):
        return p.add_(g, alpha=-0.1)

    gm = _graph(step)
    ref = p.clone()
    gm(ref, g)
    wrong = p.clone().add_(g, alpha=0.1)
    assert not explained_by_rounding(gm, [p, g], None, [ref, ref, g], [wrong, wrong, g],
                                     RTOL, ATOL)


def test_aliased_inputs_stay_aliased_in_the_float64_run() -> None:
    """A weight and its transposed view, the weight updated in place: an executable that
    took them as independent values reads the stale view. Converted to float64 one by
    one, the judge's reference made the same mistake and accepted it as rounding."""
    from torchneuron.compiler import verify

    def step(w: torch.Tensor, wt: torch.Tensor) -> tuple[torch.Tensor]:
        w.add_(0.5)
        return (wt * 2,)

    def independent(args: list[torch.Tensor]) -> list[torch.Tensor]:
        out = args[1].clone() * 2  # read before the write, as if not aliased
        args[0].add_(0.5)
        return [out]

    gm = fx.symbolic_trace(step)
    w = torch.randn(3, 4)
    _, mismatch = verify.run_verified("aliased", gm, [w, w.t()], independent)
    assert mismatch is not None


def _tanh_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w)


def test_gradients_judged_against_a_float64_vector_jacobian_product() -> None:
    """``grads_explained_by_rounding`` (the Dynamo-level gradient check's judge): eager's
    own gradient passes, one off by 1% does not."""
    from torchneuron.compiler.rounding import grads_explained_by_rounding

    gm = torch.fx.symbolic_trace(_tanh_mm)
    g = torch.Generator().manual_seed(0)
    x, w, t = (torch.randn(*s, generator=g) for s in ((4, 5), (5, 3), (4, 3)))
    wr = w.clone().requires_grad_()
    (gw,) = torch.autograd.grad(gm(x, wr), wr, t)
    assert grads_explained_by_rounding(gm, [x, w], [1], [t], [gw], [gw.clone()], RTOL, ATOL)
    assert not grads_explained_by_rounding(gm, [x, w], [1], [t], [gw], [gw * 1.01], RTOL, ATOL)
