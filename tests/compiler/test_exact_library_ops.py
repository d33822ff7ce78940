"""Ops whose eager bits come from a library routine or a loop of eager's own, found by the
exact lowering sweep (``tools/lowering_coverage.py --exact``; within its tolerance, they
were not eager's bits): products with a vector (BLAS's ``dot`` / ``gemv``), a scaled
``addmm``, ``addbmm``, ``cross``, ``logaddexp2``, group norm, average pooling, ``renorm``,
grid sampling and LAPACK's factorizations and solves. Each is eager's kernel inside the
program (``decomp/eager_kernels.py``); every case here differed before."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.compiler.exact import cases_match_eager, torch_compile_matches_eager


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_vector_products_and_scaled_addmm() -> None:
    m, v, w, c = _randn(5, 10), _randn(10, seed=1), _randn(5, seed=2), _randn(5, 3, seed=3)
    cases = {
        "mv": lambda m, v, w, c: torch.mv(m, v),
        "matmul_vector": lambda m, v, w, c: m @ v,
        "addmv": lambda m, v, w, c: torch.addmv(w, m, v, beta=0.5, alpha=2.0),
        "dot": lambda m, v, w, c: torch.dot(v, v * 3),
        "vdot": lambda m, v, w, c: torch.vdot(w, w + 1),
        "inner": lambda m, v, w, c: torch.inner(m, m),
        "addr": lambda m, v, w, c: torch.addr(m, w, v, beta=0.6, alpha=0.2),
        "addmm_scaled": lambda m, v, w, c: torch.addmm(c, m[:, :2].t().t(), m[:2, :3],
                                                       beta=0.2, alpha=0.6),
        "addbmm": lambda m, v, w, c: torch.addbmm(c, m[:, :5].reshape(1, 5, 5).repeat(2, 1, 1),
                                                  c.reshape(1, 5, 3).repeat(2, 1, 1)),
    }
    cases_match_eager(cases, m, v, w, c)


def test_elementwise_formulas_norms_and_pools() -> None:
    a, b = _randn(5, 3), _randn(5, 3, seed=1)
    x = _randn(2, 6, 5, 4, seed=2)
    v = _randn(2, 3, 4, 4, 4, seed=3)
    cases = {
        "cross": lambda a, b, x, v: torch.linalg.cross(a, b),
        "logaddexp2": lambda a, b, x, v: torch.logaddexp2(a, b),
        "group_norm": lambda a, b, x, v: F.group_norm(x, 2, eps=0.5),
        "avg_pool2d": lambda a, b, x, v: F.avg_pool2d(x, 2, ceil_mode=True),
        "avg_pool3d": lambda a, b, x, v: F.avg_pool3d(v, 2),
        "adaptive_avg_pool3d": lambda a, b, x, v: F.adaptive_avg_pool3d(v, (3, 2, 3)),
        "renorm": lambda a, b, x, v: torch.renorm(a, 2, 0, 1.0),
    }
    cases_match_eager(cases, a, b, x, v)


def test_lapack_factorizations_and_solves() -> None:
    a = _randn(4, 4)
    spd = a @ a.t() + 4 * torch.eye(4)
    b = _randn(4, 3, seed=1)
    cases = {
        "cholesky": lambda s, b: torch.linalg.cholesky(s),
        "inv": lambda s, b: torch.linalg.inv(s),
        "qr": lambda s, b: torch.linalg.qr(s),
        "lu_factor": lambda s, b: torch.linalg.lu_factor(s),
        "solve_triangular": lambda s, b: torch.linalg.solve_triangular(s.triu(), b, upper=True),
        "householder": lambda s, b: torch.linalg.householder_product(s, s[0]),
    }
    cases_match_eager(cases, spd, b)


def test_group_norm_and_grid_sample_training_under_torch_compile() -> None:
    x = _randn(2, 4, 5, 6)
    grid = _randn(2, 3, 4, 2, seed=1).tanh()
    torch_compile_matches_eager(lambda x: F.group_norm(x, 2) * 3, x, grad=True)
    torch_compile_matches_eager(lambda x, g: F.grid_sample(x, g, align_corners=False), x, grid,
                                grad=True)
