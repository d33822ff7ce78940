"""TORCHNEURON_VERIFY for torch.compile: the first call checked against Dynamo's own graph.

Why here and not only in ``compiler/verify.py``: AOTAutograd traces Dynamo's graph with
our decomposition table (``backend._aot``), so every graph the compiler is given, and
which ``compiler/verify.run_verified`` runs eagerly as its reference, already holds our
decompositions. A decomposition that is itself wrong then agrees with itself. Dynamo's
graph is the user's code before any decomposition of ours: run eagerly on the CPU buffers
(``host_graph``: eager's kernels, eager's numbers, and no simulated device time), it is a
reference a wrong decomposition cannot hide from. So with ``verify`` on, the first call of
each compiled Dynamo graph also runs that copy on copies of the inputs, from the device
generator's state, and its outputs and in-place writes are compared (``compare_outputs``;
a difference that a float64 run explains as rounding, ``rounding.explained_by_rounding``,
is accepted). A mismatch is logged and counted (``verify:verify-mismatch``, as the
per-graph check), the inputs and generator are put back, and that call and every later
one run Dynamo's graph eagerly on the device: eager's numbers and eager's autograd, the
backward included.

What it does not see: a compiled backward is checked by the per-graph check only, against
AOTAutograd's (decomposed) backward graph; a graph Dynamo hands over boxed (``GmWrapper``)
is checked by the per-graph check only; a graph whose host copy cannot run (it raises on
the copies: eager's own error, or a module call over device tensors) is not compared here.
"""

from __future__ import annotations

import copy
import itertools
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from torchneuron.compiler.rounding import copy_preserving_aliases, explained_by_rounding
from torchneuron.compiler.verify import (
    ATOL,
    RTOL,
    Mismatch,
    compare_outputs,
    report_mismatch,
    run_reference,
)
from torchneuron.device import NeuronTensor, random

__all__ = ["host_graph", "verify_first_call"]

log = logging.getLogger("torchneuron.compiler.verify")
_ids = itertools.count()
_CPU = torch.device("cpu")


def _host(x: Any) -> Any:
    """A device argument as the CPU; a neuron tensor constant as its buffer."""
    if isinstance(x, torch.device) and x.type == "neuron":
        return _CPU
    if isinstance(x, str) and (x == "neuron" or x.startswith("neuron:")):
        return "cpu"
    if isinstance(x, NeuronTensor):
        return x.buffer
    return x


def host_graph(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of Dynamo's graph that runs on CPU tensors: every device argument
    (``device="neuron"``, ``.to("neuron:0")``) is the CPU, neuron constants their buffers.
    Attributes are shared with ``gm``, except the constants replaced on the copy."""
    ref = fx.GraphModule(gm, copy.deepcopy(gm.graph))
    for node in ref.graph.nodes:
        if node.op in ("call_function", "call_method"):
            node.args = pytree.tree_map(_host, node.args)
            node.kwargs = pytree.tree_map(_host, node.kwargs)
        elif node.op == "get_attr":
            value = getattr(ref, node.target, None)
            if isinstance(value, NeuronTensor):
                *path, leaf = str(node.target).split(".")
                owner = ref
                for part in path:
                    owner = getattr(owner, part)
                setattr(owner, leaf, value.buffer)
    ref.recompile()
    return ref


def _buffer(x: Any) -> Any:
    return x.buffer if isinstance(x, NeuronTensor) else x


def verify_first_call(compiled: Callable, gm: fx.GraphModule, host: fx.GraphModule,
                      index: int) -> Callable:
    """``compiled`` (what AOTAutograd built from ``gm``) with its first call checked
    against ``host`` (``host_graph(gm)``) run eagerly; on a mismatch, refused: that call
    and later ones run ``gm`` eagerly on the device."""
    name = f"dynamo_graph_{next(_ids)}"
    state = {"checked": False, "refused": False}

    def run(*args: Any) -> Any:
        if state["refused"]:
            return gm.forward(*args)
        if state["checked"]:
            return compiled(*args)
        state["checked"] = True
        out, mismatch = _checked(name, compiled, host, list(args), index)
        if mismatch is None:
            return out
        state["refused"] = True
        return gm.forward(*args)

    # not functools.wraps: Dynamo calls a ``__wrapped__`` function directly
    run.__dict__.update({k: v for k, v in compiled.__dict__.items() if k != "__wrapped__"})
    return run


def _checked(name: str, compiled: Callable, host: fx.GraphModule, args: list[Any],
             index: int) -> tuple[Any, Mismatch | None]:
    """Run the reference then ``compiled``; on a mismatch (reported), the inputs and the
    device generator are as they were before either run, for the caller's eager run."""
    buffers = [_buffer(a) for a in args]
    before = copy_preserving_aliases(buffers)
    clones = copy_preserving_aliases(buffers)
    gen = random.generator(index)
    start = gen.get_state()
    try:  # (random ops draw from the CPU generator set to the device generator's state)
        expected, ref_end = run_reference(host, clones, start)
    except Exception as e:  # noqa: BLE001 - nothing to compare with: the compiled path runs
        log.info("%s: not checked against Dynamo's graph, whose host copy raised %s: %s",
                 name, type(e).__name__, e)
        return compiled(*args), None
    out = compiled(*args)
    expected = [e.detach() if isinstance(e, torch.Tensor) else e
                for e in pytree.tree_leaves(expected)]
    got = [_buffer(g).detach() if isinstance(g, torch.Tensor) else g
           for g in pytree.tree_leaves(out)]
    written = [(c, b) for c, b in zip(clones, buffers, strict=True) if isinstance(b, torch.Tensor)]
    mismatch = compare_outputs(name, expected, got)
    if mismatch is None:
        mismatch = compare_outputs(name, [c for c, _ in written], [b for _, b in written])
        if mismatch is not None:
            mismatch.detail = f"input {mismatch.output} after the in-place writes"
    if mismatch is not None and explained_by_rounding(
            host, before, start, expected + [c for c, _ in written],
            got + [b for _, b in written], RTOL, ATOL):
        log.info("%s; within float32 rounding of a float64 reference: accepted", mismatch)
        mismatch = None
    if mismatch is None and ref_end is not None and not torch.equal(gen.get_state(), ref_end):
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
