"""A python number a function only returns (``x.sum().item()``) compiles: prepare returns
the tensor it reads as a 0-d output and the executable reads it as eager does. A number
the function branches on stays refused (data-dependent)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from torchneuron.compiler import compile_graph
from torchneuron.compiler.errors import PrepareError
from torchneuron.compiler.prepare.graph import prepare

_CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "float": lambda x: x.sum().item(),
    "with-a-tensor": lambda x: (x * 2, x.max().item()),
    "int": lambda x: x.argmax().item(),
    "bool": lambda x: (x > -5).all().item(),
    "one-element-1d": lambda x: x[:1].item(),
}


@pytest.mark.parametrize("name", list(_CASES))
def test_returned_item_matches_eager(name: str) -> None:
    fn = _CASES[name]
    x = torch.randn(7, generator=torch.Generator().manual_seed(3))
    want = fn(x)
    got = compile_graph(fn, [x], name=name).run([x])
    want_leaves = list(want) if isinstance(want, tuple) else [want]
    assert len(got) == len(want_leaves)
    for g, w in zip(got, want_leaves, strict=True):
        assert type(g) is type(w)
        assert torch.equal(g, w) if isinstance(w, torch.Tensor) else g == w


def test_branching_on_item_is_refused() -> None:
    with pytest.raises(PrepareError) as info:
        prepare(lambda x: x * 2 if x.sum().item() > 0 else x, [torch.randn(4)])
    assert info.value.reason == "data-dependent"


def test_item_used_in_arithmetic_is_refused() -> None:
    with pytest.raises(PrepareError) as info:
        prepare(lambda x: x * x.sum().item(), [torch.randn(4)])
    assert info.value.reason == "data-dependent"
