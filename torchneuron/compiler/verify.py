"""Verification: run a compiled graph's eager reference alongside it and compare outputs.

A compiled result that differs from eager is the worst defect this project can have,
and adaptive eager swaps executables in without the user asking. With the setting
``verify`` on (``TORCHNEURON_VERIFY=1``), each newly compiled graph's first run is
checked against the graph run eagerly on CPU, from the same inputs and the same RNG
state; a mismatch is logged, counted (``stats()`` failure ``verify:verify-mismatch``) and
the caller refuses the graph from then on. The graph given here as the reference is the
one the caller holds: under adaptive eager the captured region (before our decomposition
table, so a wrong decomposition differs from it); under torch.compile AOTAutograd's graph,
which already holds our decompositions, so ``dynamo/verify_graph.py`` also checks the
first call against Dynamo's own graph.

:func:`compare_outputs` is the reusable part (torch.compile graphs here, replayed
regions in adaptive eager): it names the graph, the output and element that differ
first, the op that produced that output (walking back through views), and the
tolerance. :func:`run_reference` runs an FX graph eagerly on clones of the inputs with
a generator state handed in, so its random draws are the executable's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from torchneuron.compiler.rounding import copy_preserving_aliases, explained_by_rounding
from torchneuron.compiler.stats import record_failure
from torchneuron.hardware.settings import get_value

__all__ = ["Mismatch", "compare_outputs", "run_reference", "run_verified", "verify_enabled",
           "report_mismatch", "RTOL", "ATOL"]

log = logging.getLogger("torchneuron.compiler.verify")

# fp32 tolerances that allow reassociated sums (the compiler fuses and reorders).
RTOL, ATOL = 1e-4, 1e-5


def verify_enabled() -> bool:
    """The ``verify`` setting (``TORCHNEURON_VERIFY``)."""
    return bool(get_value("verify"))


@dataclass
class Mismatch:
    """The first difference between a compiled graph's outputs and eager's."""

    graph: str
    output: int
    index: tuple[int, ...] | None
    expected: Any
    got: Any
    op: str | None
    rtol: float
    atol: float
    detail: str = ""

    def __str__(self) -> str:
        where = f"output {self.output}" + (f" at {list(self.index)}" if self.index else "")
        near = f", nearest op {self.op}" if self.op else ""
        return (f"compiled graph {self.graph!r} differs from eager at {where}{near}: got "
                f"{self.got}, eager gives {self.expected} (rtol={self.rtol}, atol={self.atol})"
                + (f"; {self.detail}" if self.detail else "")
                + ". The graph is refused and runs eagerly from now on; please report it.")


def _producer(graph: fx.Graph | None, output: int) -> str | None:
    """The op that computes graph output ``output``, looking through views and aliases."""
    if graph is None:
        return None
    out = next((n for n in reversed(graph.nodes) if n.op == "output"), None)
    if out is None:
        return None
    leaves = list(out.args[0]) if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    node = leaves[output] if output < len(leaves) else None
    while isinstance(node, fx.Node) and node.op == "call_function":
        target = node.target
        passthrough = isinstance(target, torch._ops.OpOverload) and (
            target.is_view or target.__name__.split(".")[0] in ("alias", "clone", "_to_copy"))
        if not passthrough or not node.args or not isinstance(node.args[0], fx.Node):
            return f"{target} (%{node.name})"
        node = node.args[0]
    return f"input %{node.name}" if isinstance(node, fx.Node) else None


_EMPTY = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "empty_permuted"})


def _only_returned(node: fx.Node) -> bool:
    """Nothing in the graph reads or writes ``node``'s values: it is only returned, or
    viewed by nodes that are only returned."""
    for user in node.users:
        if user.op == "output":
            continue
        target = user.target
        if not (isinstance(target, torch._ops.OpOverload) and target.is_view
                and _only_returned(user)):
            return False
    return True


def _uninitialized(graph: fx.Graph | None, output: int) -> bool:
    """Graph output ``output`` is (a view of) a ``torch.empty``-like allocation nothing in
    the graph writes: its values are unspecified in eager too, so they are not compared.
    Why: FSDP2 allocates its all-gather and reduce-scatter buffers with ``empty`` in one
    region and fills them between regions (its ``fsdp::`` ops run eagerly); comparing the
    garbage blacklisted those regions."""
    if graph is None:
        return False
    out = next((n for n in reversed(graph.nodes) if n.op == "output"), None)
    if out is None:
        return False
    leaves = list(out.args[0]) if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    node = leaves[output] if output < len(leaves) else None
    while (isinstance(node, fx.Node) and isinstance(node.target, torch._ops.OpOverload)
           and node.target.is_view and node.args and isinstance(node.args[0], fx.Node)):
        node = node.args[0]
    return (isinstance(node, fx.Node) and isinstance(node.target, torch._ops.OpOverload)
            and node.target.__name__.split(".")[0] in _EMPTY and _only_returned(node))


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bits as integers (a complex value's parts apart), every NaN alike."""
    t = t.detach().resolve_conj().resolve_neg()
    if t.is_complex():
        t = torch.view_as_real(t)
    t = torch.where(t.isnan(), torch.full_like(t, float("nan")), t).contiguous()
    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _first_difference(expected: torch.Tensor, got: torch.Tensor, rtol: float, atol: float
                      ) -> tuple[tuple[int, ...], Any, Any] | None:
    """With ``rtol`` and ``atol`` 0: eager's bits (a zero's sign included, NaN payloads
    aside); else within the tolerance."""
    if (expected.is_floating_point() or expected.is_complex()) and rtol == atol == 0:
        bad = _bits(expected) != _bits(got)
        if expected.is_complex():
            bad = bad.any(-1)
    elif expected.is_floating_point() or expected.is_complex():
        e, g = expected.detach().to(torch.float64 if not expected.is_complex() else
                                    torch.complex128), got.detach().to(
            torch.float64 if not expected.is_complex() else torch.complex128)
        bad = ~((e - g).abs() <= atol + rtol * e.abs())
        bad &= ~(torch.isnan(e) & torch.isnan(g))
        bad &= ~(torch.isinf(e) & (e == g))
    else:
        bad = expected != got
    if not bool(bad.any()):
        return None
    flat = int(bad.reshape(-1).nonzero()[0])
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), expected.shape))
    return index, expected.reshape(-1)[flat].item(), got.reshape(-1)[flat].item()


def compare_outputs(name: str, expected: Sequence[Any], got: Sequence[Any], *,
                    graph: fx.Graph | None = None, rtol: float = RTOL, atol: float = ATOL
                    ) -> Mismatch | None:
    """Compare every output; None when all agree, else the first :class:`Mismatch`.

    ``graph`` (optional) is the FX graph whose outputs these are, used to name the op
    nearest the first differing value. ``rtol`` and ``atol`` 0 ask for eager's bits.
    """
    if len(expected) != len(got):
        return Mismatch(name, min(len(expected), len(got)), None, f"{len(expected)} outputs",
                        f"{len(got)} outputs", None, rtol, atol)
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        if not isinstance(e, torch.Tensor):
            if e != g and not (isinstance(e, float) and e != e and g != g):
                return Mismatch(name, i, None, e, g, _producer(graph, i), rtol, atol)
            continue
        if not isinstance(g, torch.Tensor) or g.shape != e.shape or g.dtype != e.dtype:
            return Mismatch(name, i, None, f"{e.dtype}{list(e.shape)}",
                            f"{getattr(g, 'dtype', type(g).__name__)}"
                            f"{list(getattr(g, 'shape', []))}", _producer(graph, i), rtol, atol)
        diff = _first_difference(e, g, rtol, atol)
        if diff is not None and not _uninitialized(graph, i):
            index, ev, gv = diff
            return Mismatch(name, i, index, ev, gv, _producer(graph, i), rtol, atol)
    return None


def run_reference(gm: fx.GraphModule, inputs: Sequence[Any], rng_state: torch.Tensor | None
                  ) -> tuple[list[Any], torch.Tensor | None]:
    """Run ``gm`` eagerly on ``inputs`` (pass clones: mutations land on them).

    Random ops draw from the CPU default generator set to ``rng_state`` (restored after);
    returns the outputs and the generator state the draws ended in.
    """
    ctx: Any = torch.random.fork_rng(devices=[]) if rng_state is not None \
        else contextlib.nullcontext()
    with ctx:
        if rng_state is not None:
            torch.default_generator.set_state(rng_state)
        outs = gm(*inputs)
        end = torch.default_generator.get_state() if rng_state is not None else None
    return (list(outs) if isinstance(outs, (list, tuple)) else [outs]), end


def report_mismatch(mismatch: Mismatch, source: str) -> None:
    """Log the mismatch and count it as a compile failure (``verify:verify-mismatch``)."""
    log.warning("%s", mismatch)
    record_failure(source, "verify", "verify-mismatch", str(mismatch))


def run_verified(name: str, gm: fx.GraphModule, args: list[Any],
                 run: Callable[[list[Any]], list[Any]], *,
                 get_rng_state: Callable[[], torch.Tensor] | None = None,
                 set_rng_state: Callable[[torch.Tensor], None] | None = None,
                 source: str = "api", graph_args: Sequence[Any] | None = None,
                 exact: bool = False) -> tuple[list[Any], Mismatch | None]:
    """Run the executable (``run``) and ``gm`` eagerly from the same inputs and RNG state.

    The outputs are compared, then every input (in-place writes land there); a
    difference that a float64 run shows to be float32 rounding on both sides
    (``rounding.explained_by_rounding``) is accepted, unless ``exact``: then eager's bits
    are the only answer (``gm`` is then the op stream eager ran, so it gives them).
    Agreeing: returns the executable's outputs and None. Differing: the mismatch is
    reported (:func:`report_mismatch`), the inputs get eager's mutations, the generator
    eager's end state, and eager's outputs are returned with the mismatch, so even this
    first call gives eager's numbers. ``graph_args``: ``gm``'s full argument list when it
    also takes non-tensor arguments (its tensors, in order, are ``args``).
    """
    state = get_rng_state() if get_rng_state is not None else None
    full = list(args if graph_args is None else graph_args)
    clones = copy_preserving_aliases(full)
    before = copy_preserving_aliases(full)
    expected, ref_end = run_reference(gm, clones, state)
    got = run(args)
    rtol, atol = (0.0, 0.0) if exact else (RTOL, ATOL)
    mismatch = compare_outputs(name, expected, got, graph=gm.graph, rtol=rtol, atol=atol)
    written = [(c, a) for c, a in zip(clones, full, strict=True) if isinstance(a, torch.Tensor)]
    if mismatch is None:  # in-place writes into the inputs (optimizer state, statistics)
        mismatch = compare_outputs(name, [c for c, _ in written], [a for _, a in written],
                                   rtol=rtol, atol=atol)
        if mismatch is not None:
            mismatch.detail = f"input {mismatch.output} after the in-place writes"
            mismatch.op = None
    if mismatch is not None and not exact and explained_by_rounding(
            gm, before, state, list(expected) + [c for c, _ in written],
            list(got) + [a for _, a in written], RTOL, ATOL):
        log.info("%s; within float32 rounding of a float64 reference: accepted", mismatch)
        mismatch = None
    if mismatch is None and get_rng_state is not None and ref_end is not None \
            and not torch.equal(get_rng_state(), ref_end):
        mismatch = Mismatch(name, 0, None, "eager's random stream", "a different one", None,
                            RTOL, ATOL, "the graph drew a different amount of random numbers")
    if mismatch is None:
        return got, None
    report_mismatch(mismatch, source)
    for a, c in zip(args, [c for c in clones if isinstance(c, torch.Tensor)], strict=True):
        if isinstance(a, torch.Tensor):
            a.copy_(c)
    if set_rng_state is not None and ref_end is not None:
        set_rng_state(ref_end)
    return expected, mismatch
