"""Random ops that read tensor values (``bernoulli(p)``, ``normal(mean, std)``,
``multinomial``, ``rrelu``) draw eager's numbers when compiled (random_ops).

The draw happens before the executable runs, with eager's own kernel, so it may read a
graph input (the caller's tensor) or an earlier draw, never a value computed inside the
graph: that is refused. Every check runs the whole compiler and compares bitwise with
eager under one seed, including the generator's state afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

from torchneuron.compiler import compile_graph
from torchneuron.compiler.errors import CompileError, PrepareError
from torchneuron.compiler.prepare.graph import prepare


def _probs(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(11))


_CASES: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]] = {
    "bernoulli": (torch.bernoulli, lambda: [_probs(4, 6)]),
    "bernoulli-transposed": (torch.bernoulli, lambda: [_probs(6, 4).t()]),
    "normal-tensor-tensor": (lambda m, s: torch.normal(m, s) * 2,
                             lambda: [torch.randn(5, 3), _probs(5, 3)]),
    "normal-float-mean": (lambda s: torch.normal(1.5, s), lambda: [_probs(7)]),
    "multinomial": (lambda p: torch.multinomial(p, 3), lambda: [_probs(4, 5)]),
    "multinomial-replacement": (lambda p: torch.multinomial(p, 9, replacement=True),
                                lambda: [_probs(5)]),
    "rrelu-train": (lambda x: torch.nn.functional.rrelu(x, 0.1, 0.6, training=True),
                    lambda: [torch.randn(3, 8)]),
    "normal-of-a-draw": (lambda x: torch.normal(torch.rand_like(x), 0.5) + x,
                         lambda: [torch.randn(6)]),
    "two-draws-and-a-mutated-input": (
        lambda x, p: (x.add_(1), torch.bernoulli(p) + torch.rand(3)),
        lambda: [torch.zeros(3), _probs(3)]),
}


@pytest.mark.parametrize("name", list(_CASES))
def test_compiled_draws_equal_eagers(name: str) -> None:
    fn, make = _CASES[name]
    inputs = make()
    torch.manual_seed(5)
    want = pytree.tree_leaves(fn(*[t.clone() for t in inputs]))
    after_want = torch.rand(4)
    exe = compile_graph(fn, [t.clone() for t in inputs], name=name)
    torch.manual_seed(5)
    got = exe.run(inputs)
    after_got = torch.rand(4)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype and torch.equal(g, w)
    assert torch.equal(after_got, after_want)


def test_reference_run_draws_equal_eagers() -> None:
    p = _probs(3, 4)
    pg = prepare(lambda t: torch.bernoulli(t) * t, [p])
    torch.manual_seed(2)
    want = torch.bernoulli(p) * p
    torch.manual_seed(2)
    assert torch.equal(pg.run_reference([p]), want)


@pytest.mark.parametrize("fn", [lambda p: torch.bernoulli(p * 0.5),
                                lambda p: torch.multinomial(p.exp(), 2),
                                lambda p: torch.nn.functional.rrelu(p + 1, training=True)],
                         ids=["bernoulli", "multinomial", "rrelu"])
def test_a_draw_reading_a_computed_tensor_is_refused(fn: Callable[..., Any]) -> None:
    with pytest.raises(PrepareError) as info:
        prepare(fn, [_probs(4)])
    assert info.value.reason == "random-op-with-tensor-values"
    with pytest.raises(CompileError):
        compile_graph(fn, [_probs(4)], name="refused")
