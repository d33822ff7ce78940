"""Capture: a region's signature -> an FX graph of aten ops, and the plan to replay it.

Placeholders are the region's input slots (values from outside it); each entry becomes a
``call_function`` node of its overload with its recorded scalar arguments (neuron devices
become the CPU, where buffers live); the outputs are the region's *roots* (values it
creates, not views) that may be used after it. In-place writes into inputs stay in the
graph: the compiler's functionalization turns them into write-backs. Views of outputs and
of inputs are not outputs: they are rebuilt at materialization from their root's buffer
with the recorded sizes, strides and offset, so they stay views of their base.

What cannot be captured exactly is refused (``CaptureRefused``), never approximated.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from torchneuron.adaptive_eager import lift
from torchneuron.adaptive_eager.signature import (
    InputRef,
    Meta,
    NewOut,
    OpSig,
    SameOut,
    ValueRef,
    undescribe,
)
from torchneuron.dispatch.opfacts import op_facts

__all__ = ["CaptureRefused", "Plan", "plan_region", "written_refs", "build_graph", "example_inputs"]

aten = torch.ops.aten

# Ops whose meaning depends on absolute storage offsets of their input, or which change a
# tensor's metadata: a compiled graph takes contiguous inputs, so these are refused.
_REFUSED = {
    aten.as_strided.default, aten.as_strided_.default, aten.as_strided_scatter.default,
    aten.set_.source_Storage_storage_offset, aten.set_.source_Tensor, aten.set_.default,
    aten.resize_.default, aten.resize_as_.default,
}


class CaptureRefused(Exception):
    """The region cannot be captured as a graph with exactly eager's meaning. ``op`` and
    ``reason`` name the op when the refusal is the op's own, whatever region holds it
    (``refused.RefusedOps.learn`` then runs it between regions)."""

    def __init__(self, message: str, op: str | None = None, reason: str | None = None,
                 ops: dict[str, bool] | None = None):
        super().__init__(message)
        self.op = op
        self.reason = reason
        self.ops = ops or {}  # complex-values: overload -> PER_CALL or ALWAYS


@dataclass
class Plan:
    """How to run a captured region and hand out its values."""

    n_inputs: int
    input_metas: list[Meta]
    roots: dict[tuple[int, int], InputRef | ValueRef]  # value -> the value or input it views
    metas: dict[tuple[int, int], Meta]  # value -> its metadata
    outputs: list[tuple[int, int]]  # root values returned by the graph, in order
    out_index: dict[tuple[int, int], int] = field(default_factory=dict)
    root_nbytes: dict[tuple[int, int], int] = field(default_factory=dict)
    n_ops: int = 0
    written_slots: frozenset[int] = frozenset()  # inputs an op of the region may write
    first_write: dict[int, int] = field(default_factory=dict)  # slot -> first op writing it
    last_ref: dict[int, int] = field(default_factory=dict)  # slot -> last op reading it
    lift_at: dict[int, tuple] = field(default_factory=dict)  # op -> ((where, n), ...) lifted
    lifted: list[torch.dtype] = field(default_factory=list)  # dtype of lifted scalar n

    def __post_init__(self) -> None:
        self.out_index = {v: n for n, v in enumerate(self.outputs)}


PER_CALL = True  # a complex-values op refused only in its calls with a complex value
ALWAYS = False  # ... in every call: it makes complex values from real ones


def _mentions_complex(v: Any) -> bool:
    """A complex dtype among an op's static arguments (``signature.describe`` writes it
    ``("E", "torch.complex64")``)."""
    if isinstance(v, (tuple, list)):
        if len(v) == 2 and v[0] == "E" and isinstance(v[1], str):
            return getattr(torch, v[1].removeprefix("torch."), None) in _COMPLEX
        return any(_mentions_complex(x) for x in v)
    return False


_COMPLEX = (torch.complex32, torch.complex64, torch.complex128)


def _complex_refusal(sigs: tuple[OpSig, ...], input_metas: list[Meta]) -> CaptureRefused:
    """The refusal of a region holding complex values, naming every op of it that reads or
    makes one (``ops``: overload name -> ``PER_CALL`` or ``ALWAYS``), so that the runtime
    runs them all between regions from then on (``refused``) and the real ops around
    them (a Llama's rotary embedding through ``view_as_complex``) form regions that
    compile; one op learned per failed region took a dozen steps. An op that makes a
    complex value from real tensors is refused per call when a complex dtype or number
    among its arguments says so (``x.to(torch.complex64)``: a real ``.float()`` stays in
    its region), else always (``view_as_complex``)."""
    dtypes: dict[tuple[int, int], torch.dtype] = {}
    ops: dict[str, bool] = {}
    for i, (func, static, refs, outs) in enumerate(sigs):
        read = [input_metas[r.index].dtype if isinstance(r, InputRef) else dtypes.get(r.value)
                for r in refs]
        made = []
        for k, out in enumerate(outs):
            if isinstance(out, SameOut):
                dtypes[(i, k)] = read[out.arg]
            elif out is not None:
                dtypes[(i, k)] = out.meta.dtype
            made.append(dtypes.get((i, k)))
        reads = any(d is not None and d.is_complex for d in read)
        if reads or any(d is not None and d.is_complex for d in made):
            name = func.name() if isinstance(func, torch._ops.OpOverload) else str(func)
            per_call = reads or not refs or _mentions_complex(static.args)
            ops[name] = ops.get(name, PER_CALL) and per_call
    first = next(iter(ops), None)
    return CaptureRefused(f"{first} computes with complex values, which the compiler does "
                          "not lower exactly", op=first, reason="complex-values", ops=ops)


def plan_region(sigs: tuple[OpSig, ...], n_inputs: int, input_metas: list[Meta],
                live: set[tuple[int, int]]) -> Plan:
    """Resolve each value's root and pick the graph outputs: roots of the live values."""
    roots: dict[tuple[int, int], InputRef | ValueRef] = {}
    metas: dict[tuple[int, int], Meta] = {}
    nbytes: dict[tuple[int, int], int] = {}
    if any(m.dtype.is_complex for m in input_metas):  # (``abs`` of one: a real result)
        raise _complex_refusal(sigs, input_metas)
    for i, (func, _static, refs, outs) in enumerate(sigs):
        if func in _REFUSED:
            raise CaptureRefused(f"{func} depends on storage layout or changes metadata",
                                 op=str(func), reason="storage-layout")
        for k, out in enumerate(outs):
            if out is None or isinstance(out, SameOut):
                continue
            metas[(i, k)] = out.meta
            if isinstance(out, NewOut):
                if out.meta.dtype.is_complex:
                    raise _complex_refusal(sigs, input_metas)
                roots[(i, k)] = ValueRef("v", i, k)
                nbytes[(i, k)] = out.nbytes
            else:
                ref = refs[out.arg]
                root = ref if isinstance(ref, InputRef) else roots[ref.value]
                root_dtype = (input_metas[root.index].dtype if isinstance(root, InputRef)
                              else metas[root.value].dtype)
                if out.meta.dtype.is_complex or root_dtype.is_complex:
                    raise _complex_refusal(sigs, input_metas)
                if out.meta.dtype != root_dtype:
                    # rebuilt as ``as_strided`` of its root's buffer, it would read the
                    # root's elements as its own dtype's (view_as_complex gave zeros)
                    raise CaptureRefused(f"{func} views a {root_dtype} value as {out.meta.dtype}")
                roots[(i, k)] = root
    outputs = sorted({roots[v] for v in live if v in roots and isinstance(roots[v], ValueRef)})
    first_write: dict[int, int] = {}
    last_ref: dict[int, int] = {}
    for i, (func, static, refs, _outs) in enumerate(sigs):
        written = written_refs(func, static.args)
        for n, r in enumerate(refs):  # a value viewing an input slot uses that slot too
            root = r if isinstance(r, InputRef) else roots.get(r.value)
            if isinstance(root, InputRef):
                last_ref[root.index] = i
                if n in written:
                    first_write.setdefault(root.index, i)
    try:
        lift_at, lifted = lift.sites(sigs)
    except ValueError as err:
        raise CaptureRefused(str(err)) from None
    return Plan(n_inputs, input_metas, roots, metas, [r.value for r in outputs],
                root_nbytes=nbytes, n_ops=len(sigs), written_slots=frozenset(first_write),
                first_write=first_write, last_ref=last_ref, lift_at=lift_at, lifted=lifted)


def _n_tensors(desc: Any) -> int:
    """How many tensors an argument's description holds (``signature.describe``)."""
    kind = desc[0]
    if kind == "T":
        return 1
    if kind in ("L", "U"):
        return sum(map(_n_tensors, desc[1]))
    if kind == "K":
        return sum(_n_tensors(v) for _k, v in desc[1])
    return 0


def written_refs(func: Any, args: tuple) -> frozenset[int]:
    """Which of a call's tensor arguments, numbered in order (its ``refs``), the op
    writes: those inside the arguments its schema marks written (``self`` of ``mul_``,
    ``out=``), never the ones it only reads (``other`` of ``mul_``). ``args`` is the
    call's description, ``("U", (("U", positional), ("K", keywords)))``."""
    written = op_facts(func).written
    if not written:
        return frozenset()
    positional, keywords = args[1][0][1], args[1][1][1]
    at = {pos for pos, _name in written if pos < len(positional)}
    names = {name for pos, name in written if pos >= len(positional)}
    out: set[int] = set()
    n = 0
    for is_written, d in [*((k in at, d) for k, d in enumerate(positional)),
                          *((name in names, d) for name, d in keywords)]:
        count = _n_tensors(d)
        if is_written:
            out.update(range(n, n + count))
        n += count
    return frozenset(out)


def build_graph(sigs: tuple, plan: Plan) -> fx.GraphModule:
    """The region as an FX graph of aten ops over CPU buffers; lifted scalars are inputs
    after the region's input slots (0-d tensors)."""
    g = fx.Graph()
    inputs = [g.placeholder(f"in{s}") for s in range(plan.n_inputs)]
    scalars = [lift.Lifted(g.placeholder(f"s{n}")) for n in range(len(plan.lifted))]
    nodes: dict[tuple[int, int], fx.Node] = {}
    cpu = torch.device("cpu")
    for i, (func, static, refs, outs) in enumerate(sigs):
        tensors = [inputs[r.index] if isinstance(r, InputRef) else nodes[r.value] for r in refs]
        args, kwargs = undescribe(static.args, tensors, device=cpu, lifted=scalars)
        if i in plan.lift_at:
            node = lift.emit(g, func, args, kwargs)
        else:
            node = g.call_function(func, tuple(args), dict(kwargs))
        struct = static.result
        for k, out in enumerate(outs):
            if out is None or isinstance(out, SameOut):
                continue
            nodes[(i, k)] = node if struct == "single" else g.call_function(
                operator.getitem, (node, k))
    g.output(tuple(nodes[v] for v in plan.outputs))
    return fx.GraphModule(torch.nn.Module(), g)


def example_inputs(plan: Plan) -> list[torch.Tensor]:
    """Empty CPU tensors with the input slots' sizes, strides and dtypes, then a 0-d
    tensor per lifted scalar."""
    return ([torch.empty_strided(m.shape, m.stride, dtype=m.dtype) for m in plan.input_metas]
            + [torch.ones((), dtype=d) for d in plan.lifted])


def layout_root(buffer: torch.Tensor, meta: Meta, nbytes: int) -> torch.Tensor:
    """Give a root value the exact layout eager gave it (strides, offset, storage size),
    so that views rebuilt from it with recorded offsets address the same elements."""
    shape, stride, offset, dtype = meta.shape, meta.stride, meta.offset, meta.dtype
    if (offset == 0 and tuple(buffer.stride()) == tuple(stride)
            and buffer.untyped_storage().nbytes() == nbytes and buffer.dtype == dtype):
        return buffer
    storage = torch.empty(max(1, nbytes // max(1, dtype.itemsize)), dtype=dtype)
    out = storage.as_strided(shape, stride, offset)
    out.copy_(buffer)
    return out


