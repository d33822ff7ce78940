"""Bit-for-bit comparison of compiled results with eager CPU: the check the
``test_exact_*`` files share.

Equal means: same shape and dtype, NaN in the same places, every other value equal and
of the same sign (-0.0 is not 0.0). ``matches_eager`` runs the graph through
``compile_graph``; ``torch_compile_matches_eager`` through ``torch.compile`` on neuron
tensors, gradients included. A graph the compiler refuses (``CompileError``) passes
only where the caller allows it: it then runs eagerly, which is exact by definition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.utils._pytree as pytree

import torchneuron  # noqa: F401  (registers the backend and device)
from torchneuron.compiler import CompileError, compile_graph

NAN, INF = float("nan"), float("inf")


def bits_equal(got: torch.Tensor, want: torch.Tensor, what: str = "") -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got, want)
    if not want.is_floating_point():
        assert torch.equal(got, want), (what, got, want)
        return
    assert torch.equal(got.isnan(), want.isnan()), (what, got, want)
    keep = ~want.isnan()
    bad = (got[keep] != want[keep]) | (got[keep].signbit() != want[keep].signbit())
    assert not bad.any(), (what, got[keep][bad][:8], want[keep][bad][:8])


def matches_eager(fn: Callable[..., Any], *xs: torch.Tensor, refused_ok: bool = False) -> None:
    """compile_graph(fn) equals fn on CPU bit for bit (or, if ``refused_ok``, is refused)."""
    inputs = list(xs)
    want = pytree.tree_leaves(fn(*[x.clone() for x in inputs]))
    try:
        exe = compile_graph(fn, inputs)
    except CompileError:
        if refused_ok:
            return
        raise
    got = exe.run(inputs)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        bits_equal(g, w, f"output {i}")


def cases_match_eager(cases: Mapping[str, Callable[..., Any]], *xs: torch.Tensor) -> None:
    """Every case of ``cases`` in one graph, compiled once, each case's outputs equal to
    eager's bit for bit (failures named by case). Each case's lowering is its own ops on
    the same inputs, so one compile checks what one compile per case did, in a fraction
    of the time (a compile costs far more than the ops of a case)."""
    names, inputs = list(cases), list(xs)
    want = {n: pytree.tree_leaves(cases[n](*[x.clone() for x in inputs])) for n in names}

    def program(*args: torch.Tensor) -> tuple[Any, ...]:
        return tuple(cases[n](*args) for n in names)

    got = iter(compile_graph(program, inputs).run(inputs))
    bad = []
    for n in names:
        for i, w in enumerate(want[n]):
            g = next(got, None)
            assert g is not None, f"fewer outputs than eager's, at {n}"
            try:
                bits_equal(g, w, f"{n} output {i}")
            except AssertionError as e:
                bad.append(str(e))
    assert next(got, None) is None, "more outputs than eager's"
    assert not bad, "\n".join(bad)


def torch_compile_matches_eager(fn: Callable[..., Any], *xs: torch.Tensor,
                                grad: bool = False) -> None:
    """torch.compile(fn, backend="neuron") on neuron tensors equals fn on CPU, and with
    ``grad`` the gradients of ``fn(...).sum()`` with respect to the float inputs too."""
    torch._dynamo.reset()
    cpu = [x.clone().requires_grad_(grad and x.is_floating_point()) for x in xs]
    dev = [x.to("neuron").requires_grad_(grad and x.is_floating_point()) for x in xs]
    want = fn(*cpu)
    got = torch.compile(fn, backend="neuron")(*dev)
    for i, (g, w) in enumerate(zip(pytree.tree_leaves(got), pytree.tree_leaves(want),
                                   strict=True)):
        bits_equal(g.detach().cpu(), w.detach(), f"output {i}")
    if grad:
        want.sum().backward()
        got.sum().backward()
        for i, (c, d) in enumerate(zip(cpu, dev, strict=True)):
            if c.grad is not None:
                assert d.grad is not None
                bits_equal(d.grad.cpu(), c.grad, f"grad {i}")
