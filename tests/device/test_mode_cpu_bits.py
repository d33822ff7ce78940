"""Enabling adaptive eager leaves a program's CPU computations at their bits.

ATen counts every tensor as subclass-like while a dispatch mode is active, and adaptive
eager is one: a CPU ``matmul`` of [5, 5, 5] by [1, 5, 5] took an ``mm`` instead of eager's
``bmm``, a CPU ``prod``'s gradient ATen's cumprod formula and ``svdvals`` LAPACK's SVD\nwith vectors, all off in the last bits,
only because adaptive eager was on (``device.plain_paths.hold_for_cpu_tensors``)."""

from __future__ import annotations

import torch

import torchneuron.adaptive_eager as ae
from tests.compiler.exact import bits_equal


def _cpu_work() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(6)
    a, b = torch.randn(5, 5, 5, generator=g), torch.randn(1, 5, 5, generator=g)
    x = torch.randn(4, 5, generator=g).requires_grad_()
    x.prod().backward()
    return torch.matmul(a, b), x.grad, torch.linalg.svdvals(a)


def test_cpu_bits_are_the_same_with_adaptive_eager_on() -> None:
    want = _cpu_work()
    ae.reset()
    with ae.enabled():
        got = _cpu_work()
    for g, w, what in zip(got, want, ("matmul", "prod's gradient", "svdvals"), strict=True):
        bits_equal(g, w, what)
    bits_equal(_cpu_work()[1], want[1], "after disable")  # ATen's own kernels again
