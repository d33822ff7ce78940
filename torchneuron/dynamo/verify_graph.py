"""TORCHNEURON_VERIFY for torch.compile: the first call checked against Dynamo's own graph.

Why here and not only in ``compiler/verify.py``: AOTAutograd traces Dynamo's graph with
our decomposition table (``backend._aot``), so every graph the compiler is given, and
which ``compiler/verify.run_verified`` runs eagerly as its reference, already holds our
decompositions. A decomposition that is itself wrong then agrees with itself. Dynamo's
graph is the user's code before any decomposition of ours: run eagerly on the device
(eager's kernels, eager's numbers), it is a reference a wrong decomposition cannot hide
from. So with ``verify`` on, the first call of each compiled Dynamo graph also runs
Dynamo's graph eagerly on copies of the inputs, from the same generator state, and its
outputs and in-place writes are compared (``compare_outputs``; a difference that a float64
run explains as rounding, ``rounding.explained_by_rounding``, is accepted). A mismatch is
logged and counted (``verify:verify-mismatch``, as the per-graph check), the inputs and
generator are put back, and that call and every later one run Dynamo's graph eagerly on
the device: eager's numbers and eager's autograd, the backward included.

What it does not see: a compiled backward is checked by the per-graph check only, against
AOTAutograd's (decomposed) backward graph; a graph Dynamo hands over boxed (``GmWrapper``)
is checked by the per-graph check only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree

from torchneuron.compiler.rounding import copy_preserving_aliases, explained_by_rounding
from torchneuron.compiler.verify import ATOL, RTOL, Mismatch, compare_outputs, report_mismatch
from torchneuron.device import NeuronTensor, random
from torchneuron.device.tensor import wrap_buffer

__all__ = ["verify_first_call"]

_ids = itertools.count()


def _buffer(x: Any) -> Any:
    return x.buffer if isinstance(x, NeuronTensor) else x


def _on_device(values: list[Any], like: list[Any], index: int) -> list[Any]:
    """``values`` (CPU buffers) as neuron tensors where ``like`` holds neuron tensors."""
    return [wrap_buffer(v, index) if isinstance(w, NeuronTensor) else v
            for v, w in zip(values, like, strict=True)]


def verify_first_call(compiled: Callable, gm: torch.fx.GraphModule, index: int) -> Callable:
    """``compiled`` (what AOTAutograd built from ``gm``) with its first call checked
    against ``gm`` run eagerly on the device; refused (``gm`` eagerly) on a mismatch."""
    name = f"dynamo_graph_{next(_ids)}"
    state = {"checked": False, "refused": False}

    def run(*args: Any) -> Any:
        if state["refused"]:
            return gm.forward(*args)
        if state["checked"]:
            return compiled(*args)
        state["checked"] = True
        out, mismatch = _checked(name, compiled, gm, list(args), index)
        if mismatch is None:
            return out
        state["refused"] = True
        return gm.forward(*args)

    # not functools.wraps: Dynamo calls a ``__wrapped__`` function directly
    run.__dict__.update({k: v for k, v in compiled.__dict__.items() if k != "__wrapped__"})
    return run


def _checked(name: str, compiled: Callable, gm: torch.fx.GraphModule, args: list[Any],
             index: int) -> tuple[Any, Mismatch | None]:
    """Run the reference then ``compiled``; on a mismatch (reported), the inputs and the
    device generator are as they were before either run, for the caller's eager run."""
    buffers = [_buffer(a) for a in args]
    before = copy_preserving_aliases(buffers)
    clones = copy_preserving_aliases(buffers)
    gen = random.generator(index)
    start = gen.get_state()
    with torch.no_grad():
        expected = pytree.tree_leaves(gm.forward(*_on_device(clones, args, index)))
    ref_end = gen.get_state()
    gen.set_state(start)
    out = compiled(*args)
    got = pytree.tree_leaves(out)
    expected = [_buffer(e).detach() if isinstance(e, torch.Tensor) else e for e in expected]
    got_b = [_buffer(g).detach() if isinstance(g, torch.Tensor) else g for g in got]
    written = [(c, b) for c, b in zip(clones, buffers, strict=True) if isinstance(b, torch.Tensor)]
    mismatch = compare_outputs(name, expected, got_b)
    if mismatch is None:
        mismatch = compare_outputs(name, [c for c, _ in written], [b for _, b in written])
        if mismatch is not None:
            mismatch.detail = f"input {mismatch.output} after the in-place writes"
    if mismatch is not None and _rounding(gm, before, args, index, expected, got_b, written):
        mismatch = None
    if mismatch is None and not torch.equal(gen.get_state(), ref_end):
        mismatch = Mismatch(name, 0, None, "eager's random stream", "a different one", None,
                            RTOL, ATOL, "the graph drew a different amount of random numbers")
    if mismatch is None:
        return out, None
    mismatch.detail = "; ".join(filter(None, [
        mismatch.detail, "checked against Dynamo's graph run eagerly (before our "
        "decompositions): a decomposition or a lowering of this graph is wrong"]))
    report_mismatch(mismatch, "torch.compile")
    for b, saved in zip(buffers, before, strict=True):
        if isinstance(b, torch.Tensor):
            b.copy_(saved)
    gen.set_state(start)
    return out, mismatch


def _rounding(gm: torch.fx.GraphModule, before: list[Any], args: list[Any], index: int,
              expected: list[Any], got: list[Any], written: list[tuple[Any, Any]]) -> bool:
    """Whether the difference is float32 rounding (``explained_by_rounding``), with
    Dynamo's graph run in float64 on the device (no random state: a graph that draws is
    not given this benefit of the doubt, its mismatch stands)."""
    with torch.no_grad():
        return explained_by_rounding(
            gm, before, None, list(expected) + [c for c, _ in written],
            list(got) + [b for _, b in written], RTOL, ATOL,
            place=lambda vals: _on_device(vals, args, index), unplace=_buffer)
