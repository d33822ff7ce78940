"""Out-of-range indices raise in compiled code, with eager's exception type and message.

Why: eager PyTorch checks every index of ``x[i]``, ``index_put``, gather, scatter,
index_select, embedding, take, put and the ``index_*`` ops, every class target of
nll_loss / cross_entropy (``ignore_index`` allowed), multi_margin_loss and
multilabel_margin_loss, and the classes of one_hot, and raises (IndexError or
RuntimeError). StableHLO's gather clamps its start indices and its scatter drops
out-of-range updates, so a compiled graph (and an adaptive-eager replay, which runs the
same executable) would hand back clamped values instead of failing: a wrong number.

How, in three places:

1. trace (``with_index_checks`` wraps the decomposition table's entries for those ops):
   the op as the *user* called it gets ``torchneuron::index_bounds(index, low, high,
   dim, kind)`` traced just before it, one per index tensor. Only at the outermost
   decomposition layer: the gathers and scatters that our or PyTorch's decompositions
   emit build in-range indices themselves and are not checked. The same wrapper gives
   ``index_put`` and ``index_fill`` their negative indices wrapped, which eager accepts
   and this torch-mlir's lowering does not (it wrote elsewhere). The Dynamo backend
   turns the checks off (``without_index_checks``) when it compiles AOTAutograd's
   graphs, which already hold them. A few ops PyTorch decomposes in Python before the
   tracer reaches the table (one_hot, multi_margin_loss): the Dynamo backend swaps in
   ``USER_LEVEL_CHECKS``' checked versions in its torch-level graph.
2. prepare (``lift_index_checks``): each check leaves the graph. Its index is read after the run:
   an index that is a graph input stays an input (the program is unchanged), any other
   becomes an extra output.
3. run (``raise_out_of_range``): after the program ran and before any write-back into
   an input, the host checks each index and raises eager's error. This is the
   simulator's bookkeeping, like eager's own check on the host; it adds no device work.
   Eager would have made the writes of the ops before the failing one, so a caller that
   can redo them does (``raised_by_index_check`` tells it the inputs are untouched): an
   adaptive-eager replay runs its deferred ops eagerly, the Dynamo backend runs Dynamo's
   graph eagerly; both then raise eager's own error at the failing op. A caller of
   ``compile_graph`` itself gets the error with the inputs as they were.

Eager runs of the check op (the Dynamo fallback and verification's reference run the
AOTAutograd graph op by op) do the same check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

__all__ = ["IndexCheck", "USER_LEVEL_CHECKS", "with_index_checks", "without_index_checks",
           "lift_index_checks", "raise_out_of_range", "raised_by_index_check", "check_index",
           "outside", "specs_of"]

aten = torch.ops.aten

_BOUNDS = "index {v} is out of bounds for dimension {dim} with size {size}"
# kind -> (eager's exception type, eager's message[, its message for an index below
# ``low``, when eager has a second one]); {v}: the first index out of range
_KINDS: dict[str, tuple[Any, ...]] = {
    "index": (IndexError, _BOUNDS),  # x[i], index_put, index_fill
    "scatter": (RuntimeError, _BOUNDS),  # gather, scatter*, index_add
    "in_self": (IndexError, "index out of range in self"),  # index_select, embedding, ...
    "flat": (IndexError, "out of range: tried to access index {v} on a tensor of {size} "
                         "elements."),  # take, put
    "index_copy": (IndexError, "index_copy_(): " + _BOUNDS),
    "target": (IndexError, "Target {v} is out of bounds."),  # nll_loss, cross_entropy
    "one_hot": (RuntimeError, "Class values must be smaller than num_classes.",
                "Class values must be non-negative."),
    "multi_margin": (RuntimeError, "target out of range"),
    "multilabel": (RuntimeError, "argument #2 'target' is out of range"),
}

_lib = torch.library.Library("torchneuron", "FRAGMENT")
_lib.define("index_bounds(Tensor index, int low, int high, int dim, str kind, "
            "int? skip=None) -> ()")


def check_index(index: torch.Tensor, low: int, high: int, dim: int, kind: str,
                where: str = "", skip: int | None = None) -> None:
    """Raise eager's error if any element of ``index`` other than ``skip`` (nll_loss's
    ``ignore_index``) lies outside ``[low, high)``."""
    if index.numel() == 0:
        return
    flat = index.reshape(-1)
    bad = outside(flat, low, high, skip)
    if not bool(bad.any()):
        return
    error, message, *below = _KINDS[kind]
    if below and bool((flat[bad] < low).any()):
        message = below[0]  # eager checks the minimum first (one_hot)
    first = int(flat[bad.nonzero()[0, 0]])
    raise error(message.format(v=first, dim=dim, size=high) + where)


def outside(index: torch.Tensor, low: int, high: int, skip: int | None = None
            ) -> torch.Tensor:
    """Where ``index`` lies outside ``[low, high)``, ``skip`` (an ``ignore_index``) allowed."""
    bad = (index < low) | (index >= high)
    if skip is not None:
        bad &= index != skip
    return bad


def specs_of(op: Any, args: Sequence[Any]) -> list[Spec]:
    """The range checks eager makes on ``op(*args)``'s index arguments (``op`` one of the
    checked ops): ``(index, low, high, dim, kind[, skip])`` each. Only the index values
    are read later; everything else comes from the arguments' shapes and scalars."""
    return _CHECKED[op](*args)


def _eager(index: torch.Tensor, low: int, high: int, dim: int, kind: str,
           skip: int | None = None) -> None:
    check_index(index.cpu() if index.device.type != "cpu" else index, low, high, dim, kind,
                skip=skip)


def _fake(index: torch.Tensor, low: int, high: int, dim: int, kind: str,
          skip: int | None = None) -> None:
    return None


_lib.impl("index_bounds", _eager, "CompositeExplicitAutograd")
_lib.impl("index_bounds", _fake, "Meta")
INDEX_BOUNDS = torch.ops.torchneuron.index_bounds.default
torch.fx.node.has_side_effect(INDEX_BOUNDS)  # a check with no output: never dead code

# ---------------------------------------------------------------------------- 1. trace

_enabled: ContextVar[bool] = ContextVar("torchneuron_index_checks", default=True)


@contextlib.contextmanager
def without_index_checks() -> Iterator[None]:
    """Trace without adding checks (a graph that already holds them)."""
    token = _enabled.set(False)
    try:
        yield
    finally:
        _enabled.reset(token)


Spec = tuple[Any, ...]  # index, low, high, dim, kind[, skip]


def _size(x: torch.Tensor, dim: int) -> tuple[int, int]:
    """(normalized dim, its size); a 0-d tensor indexes like a 1-element one."""
    if x.dim() == 0:
        return 0, 1
    d = dim % x.dim()
    return d, int(x.shape[d])


def _along_dim(kind: str, negative: bool) -> Callable[..., list[Spec]]:
    """Ops called ``(self, dim, index, ...)``."""
    def specs(x: torch.Tensor, dim: int, index: torch.Tensor, *args: Any, **kwargs: Any
              ) -> list[Spec]:
        d, n = _size(x, dim)
        return [(index, -n if negative else 0, n, d, kind)]

    return specs


def _indices(x: torch.Tensor, indices: Sequence[torch.Tensor | None], *args: Any,
             **kwargs: Any) -> list[Spec]:
    """``x[i0, i1, ...]`` (index.Tensor, index_put): eager numbers the indexed dims."""
    specs: list[Spec] = []
    dim = k = 0
    for i in indices:
        if i is None:
            dim += 1
            continue
        if i.dtype in (torch.bool, torch.uint8):  # a mask: a shape check, made at trace
            dim, k = dim + i.dim(), k + i.dim()
            continue
        n = int(x.shape[dim]) if dim < x.dim() else 1
        specs.append((i, -n, n, k, "index"))
        dim, k = dim + 1, k + 1
    return specs


def _flat(x: torch.Tensor, index: torch.Tensor, *args: Any, **kwargs: Any) -> list[Spec]:
    n = x.numel()
    return [(index, -n, n, 0, "flat")]


def _embedding(weight: torch.Tensor, indices: torch.Tensor, *args: Any, **kwargs: Any
               ) -> list[Spec]:
    return [(indices, 0, int(weight.shape[0]), 0, "in_self")]


def _target(x: torch.Tensor, target: torch.Tensor, weight: Any = None, reduction: int = 1,
            ignore_index: int = -100, *args: Any, **kwargs: Any) -> list[Spec]:
    """nll_loss / nll_loss2d forward (cross_entropy's too): classes along dim 1 of a
    batch, dim 0 of one sample; ``ignore_index`` is allowed wherever it lies."""
    n = int(x.shape[1 if x.dim() > 1 else 0])
    return [(target, 0, n, 0, "target", int(ignore_index))]


def _one_hot(index: torch.Tensor, num_classes: int = -1) -> list[Spec]:
    # num_classes=-1 takes the maximum: data-dependent, never traced to a graph
    return [(index, 0, int(num_classes), 0, "one_hot")] if num_classes >= 0 else []


def _margin_target(kind: str, low: int) -> Callable[..., list[Spec]]:
    def specs(x: torch.Tensor, target: torch.Tensor, *args: Any, **kwargs: Any
              ) -> list[Spec]:
        return [(target, low, int(x.shape[-1]) if x.dim() else 1, 0, kind)]

    return specs


_SCATTER = _along_dim("scatter", negative=False)
_CHECKED: dict[Any, Callable[..., list[Spec]]] = {
    aten.index.Tensor: _indices,
    aten.index_put.default: _indices,
    aten.take.default: _flat,
    aten.put.default: _flat,
    aten.gather.default: _SCATTER,
    aten.scatter.src: _SCATTER,
    aten.scatter.value: _SCATTER,
    aten.scatter.reduce: _SCATTER,
    aten.scatter.value_reduce: _SCATTER,
    aten.scatter_add.default: _SCATTER,
    aten.scatter_reduce.two: _SCATTER,
    aten.index_add.default: _SCATTER,
    aten.index_select.default: _along_dim("in_self", negative=False),
    aten.index_reduce.default: _along_dim("in_self", negative=False),
    aten.index_copy.default: _along_dim("index_copy", negative=False),
    aten.index_fill.int_Scalar: _along_dim("index", negative=True),
    aten.index_fill.int_Tensor: _along_dim("index", negative=True),
    aten.embedding.default: _embedding,
    # the loss family: under Dynamo's python dispatcher the composite the user called
    # is the outermost layer; under a plain trace, the forward op
    aten.cross_entropy_loss.default: _target,
    aten.nll_loss.default: _target,
    aten.nll_loss_nd.default: _target,
    aten.nll_loss2d.default: _target,
    aten.nll_loss_forward.default: _target,
    aten.nll_loss2d_forward.default: _target,
    aten.one_hot.default: _one_hot,
    aten.multi_margin_loss.default: _margin_target("multi_margin", 0),
    aten.multilabel_margin_loss.default: _margin_target("multilabel", -1),
    aten.multilabel_margin_loss_forward.default: _margin_target("multilabel", -1),
}


def _wrap(index: torch.Tensor, n: int) -> torch.Tensor:
    return torch.where(index < 0, index + n, index)


def _index_put_wrapped(x: torch.Tensor, indices: Sequence[torch.Tensor | None], values: Any,
                       accumulate: bool = False) -> Any:
    wrapped: list[torch.Tensor | None] = []
    dim = 0
    for i in indices:
        if i is not None and not (i.dtype in (torch.bool, torch.uint8) or i.is_floating_point()):
            i = _wrap(i, int(x.shape[dim]) if dim < x.dim() else 1)
        wrapped.append(i)
        dim += 1 if i is None or i.dtype not in (torch.bool, torch.uint8) else i.dim()
    return aten.index_put.default(x, wrapped, values, accumulate)


def _index_fill_wrapped(op: Any) -> Callable[..., Any]:
    def fn(x: torch.Tensor, dim: int, index: torch.Tensor, value: Any) -> Any:
        return op(x, dim, _wrap(index, _size(x, dim)[1]), value)

    return fn


# Ops whose negative indices eager accepts and this torch-mlir's lowering does not (it
# writes elsewhere): the user's op gets them wrapped (``i + n`` where ``i < 0``). Only the
# user's: decompositions that call index_put build non-negative indices.
_WRAP_NEGATIVE: dict[Any, Callable[..., Any]] = {
    aten.index_put.default: _index_put_wrapped,
    aten.index_fill.int_Scalar: _index_fill_wrapped(aten.index_fill.int_Scalar),
    aten.index_fill.int_Tensor: _index_fill_wrapped(aten.index_fill.int_Tensor),
}


def _outermost() -> bool:
    """Called by the tracer for an op of the traced program itself, not for one that a
    decomposition emitted (the tracer counts the decomposition layers it is inside)."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    mode = get_proxy_mode()
    if mode is None:
        return False
    try:
        layers = mode.decomp_layers  # PyTorch's private counter: no silent default
    except AttributeError as e:  # renamed: every check would be off, a wrong number
        raise RuntimeError(
            "torchneuron's index-range checks count decomposition layers with PyTorch's "
            "ProxyTorchDispatchMode.decomp_layers, which this PyTorch lacks; "
            "compiler/index_bounds.py must be updated for it") from e
    return layers == 1


def _checked(op: Any, specs: Callable[..., list[Spec]], prev: Callable[..., Any] | None
             ) -> Callable[..., Any]:
    def fn(*args: Any, **kwargs: Any) -> Any:
        if _enabled.get() and _outermost():
            for index, *bounds in specs(*args, **kwargs):
                if index.numel() and not index.is_floating_point() \
                        and index.dtype is not torch.bool:
                    INDEX_BOUNDS(index, *bounds)
            wrap = _WRAP_NEGATIVE.get(op)
            if wrap is not None:
                return wrap(*args, **kwargs)  # the op again, one layer down: as before
        return NotImplemented if prev is None else prev(*args, **kwargs)

    return fn


def _user_level(fn: Callable[..., Any], specs: Callable[..., list[Spec]]
                ) -> Callable[..., Any]:
    def checked(*args: Any, **kwargs: Any) -> Any:
        if _enabled.get():
            for index, *bounds in specs(*args, **kwargs):
                if index.numel():
                    INDEX_BOUNDS(index, *bounds)
        return fn(*args, **kwargs)

    return checked


# Ops PyTorch decomposes in Python before the tracer consults the decomposition table
# (so ``_CHECKED`` never sees them: one_hot's check is dropped, multi_margin_loss's
# becomes its gather's): the Dynamo backend calls these in their place in its
# torch-level graph.
USER_LEVEL_CHECKS: dict[Any, Callable[..., Any]] = {
    F.one_hot: _user_level(F.one_hot, _one_hot),
    F.multi_margin_loss: _user_level(F.multi_margin_loss, _margin_target("multi_margin", 0)),
}


def with_index_checks(table: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """Entries for ``table`` that add the checks, then do what ``table`` did (its entry,
    or the op itself). Outermost: applied after every other wrapper."""
    return {op: _checked(op, specs, table.get(op)) for op, specs in _CHECKED.items()}


# ---------------------------------------------------------------------------- 2. prepare


@dataclass(frozen=True)
class IndexCheck:
    """One lifted check: the index is user input ``position`` (``source`` "input") or
    graph output ``position`` ("output"); it must lie in ``[low, high)`` or equal
    ``skip``."""

    source: str
    position: int
    low: int
    high: int
    dim: int
    kind: str
    skip: int | None = None

    def to_list(self) -> list[Any]:
        fields = [self.source, self.position, self.low, self.high, self.dim, self.kind]
        return fields if self.skip is None else [*fields, self.skip]


def lift_index_checks(gm: fx.GraphModule, outputs: list[Any], num_user_inputs: int
                      ) -> list[IndexCheck]:
    """Take every ``index_bounds`` node out of ``gm``; an index that is not a user input
    (the first ``num_user_inputs`` placeholders) is appended to ``outputs``."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"][:num_user_inputs]
    inputs = {n: i for i, n in enumerate(placeholders)}
    checks: list[IndexCheck] = []
    exported: dict[fx.Node, int] = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not INDEX_BOUNDS:
            continue
        index, low, high, dim, kind, *rest = node.args
        skip = rest[0] if rest else node.kwargs.get("skip")
        if index in inputs:
            source, position = "input", inputs[index]
        else:
            if index not in exported:
                exported[index] = len(outputs)
                outputs.append(index)
            source, position = "output", exported[index]
        check = IndexCheck(source, position, int(low), int(high), int(dim), str(kind),
                           None if skip is None else int(skip))
        if check not in checks:
            checks.append(check)
        gm.graph.erase_node(node)
    return checks


# ---------------------------------------------------------------------------- 3. run


_RAISED_BY_CHECK = "_torchneuron_index_check"


def raise_out_of_range(checks: Sequence[IndexCheck | Sequence[Any]],
                       inputs: Sequence[torch.Tensor], results: Sequence[torch.Tensor],
                       name: str = "") -> None:
    """Raise eager's error for the first check whose index is out of range (marked for
    ``raised_by_index_check``)."""
    for c in checks:
        source, position, low, high, dim, kind, *skip = \
            c.to_list() if isinstance(c, IndexCheck) else c
        index = inputs[position] if source == "input" else results[position]
        where = f"\n(found after running the compiled program {name})" if name else ""
        try:
            check_index(index, low, high, dim, kind, where, skip[0] if skip else None)
        except (IndexError, RuntimeError) as e:
            setattr(e, _RAISED_BY_CHECK, True)
            raise


def raised_by_index_check(error: BaseException) -> bool:
    """Whether ``error`` is a compiled program's failed index check: the program ran,
    nothing was written back, and its results are to be discarded. A caller that can run
    the same ops eagerly (an adaptive-eager replay) does so, for eager's writes before the
    failing op and eager's error at it."""
    return bool(getattr(error, _RAISED_BY_CHECK, False))
