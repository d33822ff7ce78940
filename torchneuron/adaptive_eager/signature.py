"""Cheap op signatures: what a guard compares, what a region is keyed by, how it prints.

An op is described by its overload, a static description of its arguments (tensor
metadata, scalar values and their types, grad mode and autocast state) and its dataflow
(for each tensor argument: which earlier value of the region feeds it, or which input
slot of the region). Call sites never enter a signature, so identical blocks (the layers
of a transformer) are the same region. Descriptions are nested tuples, hashable and free
of object identities, so a region's key is a stable hash across processes.

The records of a signature are named tuples (``OpSig``, ``Static``, ``Call``, ``Meta``,
``InputRef``, ``ValueRef``, ``SameOut``, ``ViewOut``, ``NewOut``): read by field name, yet
still tuples, as cheap to build, hash and compare as before. A named tuple compares equal
to any tuple of the same values, whatever its class, so the records that share a place
(the two references, the three outputs) keep their old leading tag (``"x"``, ``"v"``,
``"same"``, ``"view"``, ``"new"``): without it a view of argument 0 and a new value of
0 bytes with the same metadata would be equal. Each prints as the plain tuple it is
(``repr``), which is the text a region key hashes: keys are those of the plain tuples
the records replaced, so executables cached under them stay found. The argument
descriptions inside ``Static.args`` stay tagged tuples (see ``describe``).
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import torch

from torchneuron.device.tensor import NeuronTensor

__all__ = ["Unsupported", "Slot", "build", "Meta", "Call", "Static", "InputRef", "ValueRef", "SameOut",
           "ViewOut", "NewOut", "OpSig", "describe", "undescribe", "meta_of", "rebuild", "rebuild_call",
           "region_key", "format_region", "OpsKey"]

_SCALARS = (bool, int, float, str, type(None))
_ENUMS = (torch.dtype, torch.layout, torch.memory_format)


class Unsupported(Exception):
    """The op's arguments cannot be part of a region (host tensors, generators, ...)."""


# ``build(Record, (values...))`` is ``Record(values...)`` without the named tuple's
# Python-level ``__new__`` (a frame and an argument tuple less: about half the cost), for
# the records built per op while recording; elsewhere records are built by their class.
build = tuple.__new__


class Meta(NamedTuple):
    """What a region guards on per tensor (``meta_of``)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # storage offset, in elements
    dtype: torch.dtype

    __repr__ = tuple.__repr__  # the text region keys hash (see the module docstring)


class Call(NamedTuple):
    """What ``recorder.static_of`` gives for a call: what a guard compares it by."""

    args: tuple  # ("U", (("U", positional descriptions), ("K", ((name, description), ...))))
    grad: bool  # grad mode
    autocast: bool

    __repr__ = tuple.__repr__


class Static(NamedTuple):
    """A recorded op's static description: its ``Call`` and its result's structure."""

    args: tuple
    grad: bool
    autocast: bool
    result: str  # "single", "tuple", "list" or "none" (``recorder.outputs_of``)

    __repr__ = tuple.__repr__

    @property
    def call(self) -> Call:
        """The ``Call`` part: what a live call's ``static_of`` is compared with."""
        return Call(self.args, self.grad, self.autocast)


class InputRef(NamedTuple):
    """A tensor argument that is the region's input ``index`` (slots in order of first use)."""

    tag: str  # always "x" (see the module docstring)
    index: int

    __repr__ = tuple.__repr__


class ValueRef(NamedTuple):
    """A tensor argument that is output ``output`` of the region's op ``op``."""

    tag: str  # always "v"
    op: int
    output: int

    __repr__ = tuple.__repr__

    @property
    def value(self) -> tuple[int, int]:
        """``(op, output)``: how plans and guards key a region's values."""
        return (self.op, self.output)


class SameOut(NamedTuple):
    """An output that is the op's tensor argument ``arg`` itself (an in-place op)."""

    tag: str  # always "same"
    arg: int

    __repr__ = tuple.__repr__


class ViewOut(NamedTuple):
    """An output that views the storage of the op's tensor argument ``arg``."""

    tag: str  # always "view"
    meta: Meta
    arg: int

    __repr__ = tuple.__repr__


class NewOut(NamedTuple):
    """An output with a storage of its own, of ``nbytes`` bytes."""

    tag: str  # always "new"
    meta: Meta
    nbytes: int

    __repr__ = tuple.__repr__


class OpSig(NamedTuple):
    """One op of a region: its overload, static description, the reference of each tensor
    argument (``InputRef`` or ``ValueRef``) and what each output is (None, ``SameOut``,
    ``ViewOut`` or ``NewOut``)."""

    func: Any
    static: Static
    refs: tuple
    outs: tuple

    __repr__ = tuple.__repr__


class Slot:
    """Stands for the j-th tensor argument in an argument template."""

    __slots__ = ("j",)

    def __init__(self, j: int) -> None:
        self.j = j


def meta_of(t: torch.Tensor) -> Meta:
    """(shape, stride, storage offset, dtype): what a region guards on per tensor."""
    return build(Meta, (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype))


def describe(x: Any, tensors: list[torch.Tensor]) -> tuple[Any, Any]:
    """(static description, template) of an argument structure.

    Tensors are appended to ``tensors`` and described by their metadata; the template
    is the structure with tensors replaced by ``Slot``s (to re-run the op later).

    A description is a tagged tuple, ``(kind, ...)``: ``("T", Meta)``, ``(type name,
    value)`` for a scalar (``repr`` for a float), ``("L" | "U", items)`` for a list or
    tuple, ``("K", ((name, item), ...))``, ``("D", type, index)``, ``("E", name)``, and
    ``("lifted", n)`` (``lift``). It stays a plain tagged tree, read by walkers that
    dispatch on ``kind``: it is built for every argument of every op recorded or guarded
    (a record class per kind would cost that loop most), and the kind, a type's name
    for scalars, is what it means.
    """
    if isinstance(x, NeuronTensor):
        tensors.append(x)
        return ("T", meta_of(x)), Slot(len(tensors) - 1)
    if isinstance(x, torch.Tensor):
        raise Unsupported("host tensor argument")
    if isinstance(x, _SCALARS):
        # the type matters (add(x, 1) and add(x, 1.0) promote differently); repr keeps
        # -0.0 apart from 0.0 and makes nan equal to itself
        return (type(x).__name__, repr(x) if type(x) is float else x), x
    if isinstance(x, (list, tuple)):
        pairs = [describe(v, tensors) for v in x]
        desc = ("L" if isinstance(x, list) else "U", tuple(p[0] for p in pairs))
        items = [p[1] for p in pairs]
        return desc, (items if isinstance(x, list) else tuple(items))
    if isinstance(x, dict):
        pairs = {k: describe(v, tensors) for k, v in x.items()}
        return ("K", tuple((k, p[0]) for k, p in pairs.items())), {k: p[1] for k, p in pairs.items()}
    if isinstance(x, torch.device):
        return ("D", x.type, x.index), x
    if isinstance(x, _ENUMS):
        return ("E", str(x)), x
    raise Unsupported(f"argument of type {type(x).__name__}")


def rebuild(template: Any, tensors: list[Any]) -> Any:
    """The argument structure of ``template`` with ``Slot(j)`` replaced by ``tensors[j]``."""
    if isinstance(template, Slot):
        return tensors[template.j]
    if isinstance(template, list):
        return [rebuild(v, tensors) for v in template]
    if isinstance(template, tuple):
        return tuple(rebuild(v, tensors) for v in template)
    if isinstance(template, dict):
        return {k: rebuild(v, tensors) for k, v in template.items()}
    return template


def rebuild_call(template: tuple, tensors: list[Any]) -> tuple[tuple, dict]:
    """``rebuild`` of a call's ``(args, kwargs)`` template, without a call per leaf for
    the arguments aten ops take (slots and scalars at the top level): every deferred op of
    a replay is rebuilt so when it runs."""
    atemp, ktemp = template
    flat = []  # (a loop: a comprehension is a call)
    for a in atemp:
        tp = type(a)
        flat.append(tensors[a.j] if tp is Slot else rebuild(a, tensors) if tp in _NESTED else a)
    args = tuple(flat)
    if not ktemp:
        return args, {}
    return args, {k: tensors[a.j] if type(a) is Slot
                  else rebuild(a, tensors) if type(a) in _NESTED else a
                  for k, a in ktemp.items()}


_NESTED = (list, tuple, dict)


def undescribe(desc: Any, tensors: list[Any], device: Any = None,
               lifted: list[Any] | None = None) -> Any:
    """Rebuild an argument structure from its static description, taking tensors in order
    from ``tensors``; neuron devices become ``device`` when given (graphs run on buffers);
    a lifted scalar ``("lifted", n)`` becomes ``lifted[n]`` (see ``lift``)."""
    it = iter(tensors)

    def go(d: Any) -> Any:
        kind = d[0]
        if kind == "T":
            return next(it)
        if kind == "L":
            return [go(v) for v in d[1]]
        if kind == "U":
            return tuple(go(v) for v in d[1])
        if kind == "K":
            return {k: go(v) for k, v in d[1]}
        if kind == "D":
            if device is not None and d[1] == "neuron":
                return device
            return torch.device(d[1], d[2]) if d[2] is not None else torch.device(d[1])
        if kind == "E":
            return getattr(torch, d[1].removeprefix("torch."))
        if kind == "float":
            return float(d[1])
        if kind == "lifted":
            if lifted is None:
                raise ValueError("a lifted scalar needs its value (lifted=...)")
            return lifted[d[1]]
        return d[1]

    return go(desc)


class OpsKey(tuple):
    """A tuple of ops (``OpSig``s) as a dict key: it hashes once, from its ops' hashes,
    each kept per op by the op's identity (``_OP_HASHES``).

    Why: a plain tuple hashes every op's description down to the shapes each time, and
    a window new this step is mostly ops seen before (a step whose floats change, AdamW's
    bias corrections, is a new window of the same ops but for a few, every step): in
    the zoo GPT, the lookup and store of one new window's key hashed its 216 ops twice,
    each op a Python call for its overload's hash. It equals the plain tuple of the same
    ops; equal keys hash alike (equal ops hash alike). A table keyed by these is looked
    up only with these."""

    def __hash__(self) -> int:
        h = self.__dict__.get("hash")
        if h is None:
            if len(_OP_HASHES) + len(self) > _OP_HASHES_KEPT:
                _OP_HASHES.clear()
                _OP_KEPT.clear()
            hs = list(map(_OP_HASHES.get, map(id, self)))
            if None in hs:
                for i, x in enumerate(hs):
                    if x is None:
                        op = self[i]
                        hs[i] = _OP_HASHES[id(op)] = hash(op)
                        _OP_KEPT[id(op)] = op  # (kept: no other object takes its id)
            h = self.__dict__["hash"] = hash(tuple(hs))
        return h


_OP_HASHES: dict[int, int] = {}  # id of an op of an ``OpsKey`` -> its hash
_OP_KEPT: dict[int, Any] = {}  # the same ops, kept while their hashes are
_OP_HASHES_KEPT = 1 << 16  # (all forgotten at once past this)


def region_key(sigs: tuple) -> str:
    """A stable key for a region: the hash of its signature (nothing process-dependent).

    Remembered per signature, and the printed form of each op remembered too: every
    closed window asks, windows share most of their ops with earlier ones (the same step
    again, a prefix, AdamW's step with only its bias corrections changed), and printing a
    long signature costs far more than finding its ops again; first by the identities of
    its ops (the recorder interns them, see ``recorder.Segment``), which costs no walk
    down each op's description to hash it. Descriptions compare equal
    exactly when they print the same (scalars carry their type names, floats their
    ``repr``), so the text hashed is ``repr(sigs)`` either way."""
    ids = tuple(map(id, sigs))  # the recorder's ops are interned: found by identity
    got = _keys_by_ids.get(ids)
    if got is not None:
        return got[1]
    by_value = OpsKey(sigs)  # (hashed from its ops' kept hashes)
    key = _region_keys.get(by_value)
    if key is None:
        parts = []
        for sig in sigs:
            got = _sig_texts.get(id(sig))  # (the op kept with its text: its id is its own)
            if got is None or got[0] is not sig:
                if len(_sig_texts) >= _SIG_TEXTS_KEPT:
                    _sig_texts.clear()
                got = _sig_texts[id(sig)] = (sig, repr(sig))
            parts.append(got[1])
        text = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
        key = hashlib.sha256(text.encode()).hexdigest()[:24]
        if len(_region_keys) >= _REGION_KEYS_KEPT:
            _region_keys.clear()
        _region_keys[by_value] = key
    if len(_keys_by_ids) >= _REGION_KEYS_KEPT:
        _keys_by_ids.clear()
    _keys_by_ids[ids] = (sigs, key)  # (``sigs`` kept: no other object takes their ids)
    return key


_SIG_TEXTS_KEPT = 16384
_sig_texts: dict[int, tuple[tuple, str]] = {}  # id of an op -> (the op, its printed form)
_REGION_KEYS_KEPT = 1024
_region_keys: dict[OpsKey, str] = {}
_keys_by_ids: dict[tuple, tuple[tuple, str]] = {}  # ids of sigs' items -> (sigs, key)


_SHORT = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.bool: "b8", torch.uint8: "u8", torch.int8: "i8",
}


def _type_text(meta: Meta) -> str:
    return f"{_SHORT.get(meta.dtype, str(meta.dtype).removeprefix('torch.'))}{list(meta.shape)}"


def _arg_text(desc: Any, names: list[str]) -> str:
    kind = desc[0]
    if kind == "T":
        return names.pop(0)
    if kind in ("L", "U"):
        inner = ", ".join(_arg_text(d, names) for d in desc[1])
        return f"[{inner}]"
    if kind == "K":
        return ", ".join(f"{k}={_arg_text(d, names)}" for k, d in desc[1])
    if kind == "D":
        return f"{desc[1]}" if desc[2] is None else f"{desc[1]}:{desc[2]}"
    if kind == "E":
        return desc[1]
    if kind == "lifted":
        return f"%s{desc[1]}"
    return str(desc[1])


def format_region(sigs: tuple) -> str:
    """One op per line, ``$4: f32[2, 4] = aten.mm.default($3, $2)``; inputs are ``$in0``...,
    lifted scalars ``%s0``...

    ``sigs`` are a region's ``OpSig``s (see ``recorder.Segment.relative``).
    """
    value_names: dict[tuple[int, int], str] = {}
    lines = []
    n = 0
    for i, sig in enumerate(sigs):
        refs = sig.refs
        names = [_ref_name(ref, value_names) for ref in refs]
        args_desc, kwargs_desc = sig.static.args[1]
        text = ", ".join(x for x in (
            ", ".join(_arg_text(d, names) for d in args_desc[1]),
            _arg_text(kwargs_desc, names) if kwargs_desc[1] else "",
        ) if x)
        outs_text = []
        for k, out in enumerate(sig.outs):
            if out is None:
                outs_text.append("None")
                continue
            if isinstance(out, SameOut):
                value_names[(i, k)] = _ref_name(refs[out.arg], value_names)
                outs_text.append(value_names[(i, k)])
                continue
            name = f"${n}"
            n += 1
            value_names[(i, k)] = name
            outs_text.append(f"{name}: {_type_text(out.meta)}")
        lhs = ", ".join(outs_text) if outs_text else "_"
        lines.append(f"{lhs} = {sig.func}({text})")
    return "\n".join(lines)


def _ref_name(ref: InputRef | ValueRef, value_names: dict) -> str:
    if isinstance(ref, InputRef):
        return f"$in{ref.index}"
    return value_names.get(ref.value, "$?")
