"""More ops the exact lowering sweep (``tools/lowering_coverage.py --exact``) found off in
the last bits, after test_exact_library_ops: each is eager's kernel inside the program
(``decomp/eager_kernels.py``) or refused. Every case here differed on the code before.

- LAPACK calls whose eager-kernel entry never applied: the probe asking whether eager
  takes the dtypes ran the call on zeros, which ``torch.cholesky`` (not positive-definite)
  and the LU solves (pivots below 1) reject, so they fell to lowerings (``_lapack_probe``);
  ``linalg.solve`` is ``_linalg_solve_ex``, which was not listed;
- ``bilinear`` (``_trilinear``), an embedding bag with per-sample weights, and
  ``multilabel_margin_loss`` (PyTorch's Python kernel at the Autograd key hid the op from
  the table);
- refused: ``linspace`` (eager's bits depend on the vector width) and ``polar`` (eager's
  sin and cos), so torch.compile runs them eagerly with eager's bits.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.exact import bits_equal, cases_match_eager, torch_compile_matches_eager
from torchneuron.compiler import CompileError, compile_graph


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch.cholesky / lu_solve deprecated
def test_lapack_calls_the_zero_probe_rejected() -> None:
    a, c = _randn(5, 5), _randn(5, 5, seed=3)
    spd = c @ c.t() + 5 * torch.eye(5)  # (from ``a``, the lowering happened to be exact)
    b = _randn(5, 3, seed=1)
    lu, piv = torch.linalg.lu_factor(a)
    t = _randn(2, 3, 6, seed=2)
    cases = {
        "cholesky_upper": lambda a, s, b, lu, piv, t: torch.cholesky(s, upper=True),
        "lu_solve": lambda a, s, b, lu, piv, t: torch.lu_solve(b, lu, piv),
        "linalg_lu_solve_adjoint": lambda a, s, b, lu, piv, t: torch.linalg.lu_solve(
            lu, piv, b, adjoint=True),
        "solve": lambda a, s, b, lu, piv, t: torch.linalg.solve(a, b),
        "tensorsolve": lambda a, s, b, lu, piv, t: torch.linalg.tensorsolve(t, b[:2, :]),
    }
    cases_match_eager(cases, a, spd, b, lu, piv, t)


def test_bilinear_weighted_embedding_bag_and_multilabel_margin() -> None:
    x1, x2, w, bias = _randn(3, 3), _randn(3, 4, seed=1), _randn(5, 3, 4, seed=2), _randn(5, seed=3)
    table, psw = _randn(10, 5, seed=4), _randn(5, seed=5)
    idx, off = torch.tensor([1, 2, 4, 5, 4]), torch.tensor([0, 2])
    x = _randn(10, 5, seed=6)
    target = torch.randint(-1, 5, (10, 5), generator=torch.Generator().manual_seed(7))
    cases = {
        "bilinear": lambda x1, x2, w, bias, table, psw, idx, off, x, target: F.bilinear(
            x1, x2, w, bias),
        "embedding_bag": lambda x1, x2, w, bias, table, psw, idx, off, x, target: F.embedding_bag(
            idx, table, off, mode="sum", per_sample_weights=psw),
        "multilabel_margin": lambda x1, x2, w, bias, table, psw, idx, off, x, target: (
            F.multilabel_margin_loss(x, target),
            F.multilabel_margin_loss(x * 3, target, reduction="none")),
        "multilabel_margin_1d": lambda x1, x2, w, bias, table, psw, idx, off, x, target: tuple(
            F.multilabel_margin_loss(x[i] * 5, target[i], reduction="none") for i in range(10)),
    }
    cases_match_eager(cases, x1, x2, w, bias, table, psw, idx, off, x, target)


def test_multilabel_margin_gradient_under_torch_compile() -> None:
    target = torch.randint(-1, 5, (10, 5), generator=torch.Generator().manual_seed(7))
    torch_compile_matches_eager(lambda x, t: F.multilabel_margin_loss(x * 2, t) * 3,
                                _randn(10, 5, seed=6), target, grad=True)


def test_linspace_and_polar_are_refused_and_run_eagerly() -> None:
    r, theta = _randn(5).abs(), _randn(5, seed=1) * 3
    for fn, xs, reason in (
            (lambda x: torch.linspace(-2.0, -3.0, 50) + x, (torch.zeros(1),), "cpu-dependent-math"),
            (torch.polar, (r, theta), "complex-op")):
        with pytest.raises(CompileError) as e:
            compile_graph(fn, list(xs))
        assert e.value.stage == "prepare" and e.value.reason == reason, e.value
    import torchneuron  # noqa: F401

    torch._dynamo.reset()
    want = torch.view_as_real(torch.polar(r, theta)) * 2
    got = torch.compile(lambda r, t: torch.view_as_real(torch.polar(r, t)) * 2,
                        backend="neuron")(r.to("neuron"), theta.to("neuron"))
    bits_equal(got.cpu(), want, "polar")
    x = _randn(50, seed=2)
    torch._dynamo.reset()
    got = torch.compile(lambda x: torch.linspace(-2.0, -3.0, 50, device=x.device) * x,
                        backend="neuron")(x.to("neuron"))
    bits_equal(got.cpu(), torch.linspace(-2.0, -3.0, 50) * x, "linspace")
