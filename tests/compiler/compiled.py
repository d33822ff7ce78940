"""Compile a function through the whole pipeline and compare it with eager CPU: the
check the decomposition tests share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree

from torchneuron.compiler import compile_graph


def assert_compiles_to_eager(fn: Callable[..., Any], inputs: list[torch.Tensor], *,
                             rtol: float, atol: float, equal_nan: bool = False,
                             name: str = "graph") -> None:
    """Every output leaf of the compiled ``fn`` has eager's shape and dtype; floats agree
    within ``rtol``/``atol``, everything else (pivots, info, indices) exactly."""
    got = compile_graph(fn, inputs, name=name).run(inputs)
    want = pytree.tree_leaves(fn(*inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        if w.is_floating_point() or w.is_complex():
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=equal_nan)
        else:
            assert torch.equal(g, w)
