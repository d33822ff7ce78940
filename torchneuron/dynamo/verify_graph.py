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

The first call's gradients are checked too (``_Backward``). What it does not see: the
gradients of a graph that draws random numbers or holds a higher-order op (checkpoint)
are checked by the per-graph check only, against AOTAutograd's (decomposed) backward; so
is a graph Dynamo hands over boxed (``GmWrapper``); a graph whose host copy cannot run (it
raises on the copies: eager's own error, or a module call over device tensors) is not
compared here.
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

from torchneuron.compiler.rounding import (
    copy_preserving_aliases,
    explained_by_rounding,
    grads_explained_by_rounding,
)
from torchneuron.compiler.verify import (
    ATOL,
    RTOL,
    Mismatch,
    compare_outputs,
    report_mismatch,
    run_reference,
)
from torchneuron.device import NeuronTensor, random
from torchneuron.device.tensor import wrap_buffer

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
        out, mismatch = _checked(name, compiled, host, list(args), index, state)
        if mismatch is None:
            return out
        state["refused"] = True
        return gm.forward(*args)

    # not functools.wraps: Dynamo calls a ``__wrapped__`` function directly
    run.__dict__.update({k: v for k, v in compiled.__dict__.items() if k != "__wrapped__"})
    return run


def _checked(name: str, compiled: Callable, host: fx.GraphModule, args: list[Any],
             index: int, state: dict[str, bool]) -> tuple[Any, Mismatch | None]:
    """Run the reference then ``compiled``; on a mismatch (reported), the inputs and the
    device generator are as they were before either run, for the caller's eager run.
    Inputs that require a gradient reach ``compiled`` through ``_Tap`` (``_Backward``)."""
    buffers = [_buffer(a) for a in args]
    before = copy_preserving_aliases(buffers)
    clones = copy_preserving_aliases(buffers)
    wrt = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad
           and torch.is_grad_enabled()]
    for i in wrt:
        clones[i].requires_grad_()
    gen = random.generator(index)
    start = gen.get_state()
    try:  # (random ops draw from the CPU generator set to the device generator's state)
        ref_outs, ref_end = run_reference(host, clones, start)
    except Exception as e:  # noqa: BLE001 - nothing to compare with: the compiled path runs
        log.info("%s: not checked against Dynamo's graph, whose host copy raised %s: %s",
                 name, type(e).__name__, e)
        return compiled(*args), None
    # Gradients are checked unless the graph draws random numbers or holds a higher-order
    # op (a checkpoint redraws in its backward, from a state the host run cannot share)
    plain = (ref_end is None or torch.equal(ref_end, start)) and not any(
        isinstance(n.target, torch._ops.HigherOrderOperator) for n in host.graph.nodes)
    backward = _Backward(name, host, before, wrt, clones, ref_outs, index, state) \
        if wrt and plain else None
    if backward is None:
        wrt = []
    tapped = list(args)
    for i in wrt:
        tapped[i] = _Tap.apply(args[i], backward, i)
    out = compiled(*tapped)
    if backward is not None:
        backward.watch(pytree.tree_leaves(out))
    expected = [e.detach() if isinstance(e, torch.Tensor) else e
                for e in pytree.tree_leaves(ref_outs)]
    got = [_buffer(g).detach() if isinstance(g, torch.Tensor) else g
           for g in pytree.tree_leaves(out)]
    written = [(c.detach(), b) for c, b in zip(clones, buffers, strict=True)
               if isinstance(b, torch.Tensor)]
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


class _Backward:
    """The first call's gradients, checked as the compiled backward hands them out.

    Why: the compiled backward is AOTAutograd's, built from our decompositions too (the
    per-graph check compares it with itself). Hooks on the compiled outputs catch the
    gradients flowing into them (the tangents); each input that requires a gradient went
    into the compiled graph through a ``_Tap``, whose backward receives exactly this
    graph's gradient for it. That is compared with the gradient of Dynamo's graph, run on
    the host, for the same tangents; a difference that a float64 run does not explain is
    reported, eager's gradient is handed on instead and the graph is refused."""

    def __init__(self, name: str, host: fx.GraphModule, before: list[Any], wrt: list[int],
                 clones: list[Any], ref_outs: list[Any], index: int,
                 state: dict[str, bool]) -> None:
        self.name, self.host, self.before, self.wrt = name, host, before, wrt
        self.clones, self.ref_outs, self.index, self.state = clones, ref_outs, index, state
        self.tangents: list[Any] = [None] * len(ref_outs)
        self.ref: dict[int, torch.Tensor] | None = None
        self.reported = False

    def watch(self, outs: list[Any]) -> None:
        for k, o in enumerate(outs[: len(self.tangents)]):
            if isinstance(o, torch.Tensor) and o.requires_grad and not o.is_leaf:
                o.register_hook(lambda g, k=k: self._tangent(k, g))

    def _tangent(self, k: int, grad: torch.Tensor | None) -> None:
        if self.ref is not None:  # another backward pass through the graph (retain_graph)
            self.ref, self.tangents = None, [None] * len(self.tangents)
        self.tangents[k] = None if grad is None else _buffer(grad).detach()

    def _reference(self) -> dict[int, torch.Tensor]:
        if self.ref is None:
            pairs = [(o, t) for o, t in zip(self.ref_outs, self.tangents, strict=True)
                     if isinstance(o, torch.Tensor) and o.requires_grad and t is not None]
            leaves = [self.clones[i] for i in self.wrt]
            grads = torch.autograd.grad([o for o, _ in pairs], leaves,
                                        [t.to(o.dtype) for o, t in pairs], allow_unused=True,
                                        retain_graph=True) \
                if pairs else [None] * len(leaves)
            self.ref = {i: (g if g is not None else torch.zeros_like(self.clones[i])).detach()
                        for i, g in zip(self.wrt, grads, strict=True)}
        return self.ref

    def check(self, i: int, grad: torch.Tensor | None) -> torch.Tensor | None:
        """The gradient to hand on for input ``i``: the compiled one, or eager's."""
        if grad is None:
            return None
        ref = self._reference()
        got = _buffer(grad).detach()
        mismatch = compare_outputs(self.name, [ref[i]], [got])
        if mismatch is None:
            return grad
        tangents = list(self.tangents)
        if grads_explained_by_rounding(self.host, self.before, self.wrt, tangents,
                                       [ref[j] for j in self.wrt],
                                       [ref[j] if j != i else got for j in self.wrt],
                                       RTOL, ATOL):
            log.info("%s; within float32 rounding of a float64 reference: accepted", mismatch)
            return grad
        if not self.reported:
            self.reported = True
            mismatch.graph = f"{self.name} (backward)"
            mismatch.detail = (f"the gradient of input {i}, checked against Dynamo's graph run "
                               "eagerly (before our decompositions): a decomposition or a "
                               "lowering of the backward is wrong")
            report_mismatch(mismatch, "torch.compile")
            self.state["refused"] = True
        value = ref[i].to(got.dtype)
        return wrap_buffer(value, self.index) if isinstance(grad, NeuronTensor) else value


class _Tap(torch.autograd.Function):
    """Identity on the way in; on the way back, the gradient goes through ``_Backward``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, backward: _Backward, i: int) -> torch.Tensor:
        ctx.backward, ctx.i = backward, i
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, None, None]:
        return ctx.backward.check(ctx.i, grad), None, None
