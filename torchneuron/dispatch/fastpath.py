"""The cheap parts of eager dispatch: flat argument lists and per-signature facts.

Why: every eager op pays Python overhead before and after its CPU kernel, and most
of it used to depend only on the op overload and its tensors' metadata, not on
their values: the kernel's work and cost on the simulated core, whether it falls
back to the host, its compile signature. Those are computed once per *signature*
and kept in a bounded LRU cache (cachetools); per call, dispatch does only what
depends on values. Simulated time is unchanged by construction: the cached work and
cost are pure functions of the key (see ``signature_key``).

``flatten`` / ``unflatten`` replace PyTorch's generic pytree traversal for the
argument shapes aten ops actually take: positional and keyword leaves, and one level
of lists/tuples (``TensorList`` arguments of foreach ops, int lists). Anything
deeper returns None and the caller uses pytree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from cachetools import LRUCache

from torchneuron.device.tensor import NeuronTensor
from torchneuron.hardware import KernelCost, KernelWork

__all__ = [
    "CACHE_SIZE",
    "SeenKey",
    "SignatureFacts",
    "cache_info",
    "clear_cache",
    "facts_for",
    "flatten",
    "out_key",
    "remember",
    "signature_key",
    "unflatten",
    "unwrap",
    "Unwrapped",
]

CACHE_SIZE = 8192  # signatures kept; a training loop has a few hundred

_SEQ = (list, tuple)
Spec = tuple[tuple[Any, ...], tuple[tuple[str, Any], ...]]


def _leaves(value: Any, flat: list) -> Any:
    """Append ``value``'s leaves to ``flat``; its spec entry, or False if too nested."""
    tp = type(value)
    if tp is list or tp is tuple:
        for x in value:
            if type(x) in _SEQ or type(x) is dict:
                return False
        flat.extend(value)
        return (tp, len(value))
    if tp is dict:
        return False
    flat.append(value)
    return None


def flatten(args: tuple, kwargs: dict) -> tuple[list, Spec] | None:
    """Leaves of ``(args, kwargs)`` and a spec to rebuild them, or None if nested deeper."""
    flat: list = []
    aspec = []
    for a in args:
        s = _leaves(a, flat)
        if s is False:
            return None
        aspec.append(s)
    kspec = []
    for k, v in kwargs.items():
        s = _leaves(v, flat)
        if s is False:
            return None
        kspec.append((k, s))
    return flat, (tuple(aspec), tuple(kspec))


def _rebuild(spec: Any, flat: list, i: int) -> tuple[Any, int]:
    if spec is None:
        return flat[i], i + 1
    tp, n = spec
    return tp(flat[i : i + n]), i + n


def unflatten(flat: list, spec: Spec) -> tuple[list, dict]:
    """The inverse of ``flatten`` over new leaves (same count and order)."""
    aspec, kspec = spec
    i = 0
    args = []
    for s in aspec:
        v, i = _rebuild(s, flat, i)
        args.append(v)
    kwargs = {}
    for k, s in kspec:
        kwargs[k], i = _rebuild(s, flat, i)
    return args, kwargs


class _Marker:
    """A stand-in for a value whose exact value the cached facts do not depend on."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_FLOAT, _COMPLEX, _TRUE, _FALSE = (_Marker(n) for n in ("float", "complex", "True", "False"))
_EXACT = (int, type(None), str, torch.dtype, torch.device, torch.layout, torch.memory_format)


def signature_key(func: Any, uflat: list, spec: Any) -> tuple | None:
    """What an eager op's work, cost and fallback can depend on, or None (do not cache).

    Tensors contribute shape, strides and dtype, and which earlier argument they are
    (``add(a, b, out=a)`` reads differently from ``add(a, b, out=c)``); ints, bools,
    None, strings, dtypes and devices their values (conv strides, output masks, dims);
    floats and complex numbers only their type: the cost model reads no float
    argument's value (learning rates, alphas), so an optimizer's changing scalars
    still hit the cache. Anything else (SymInts, generators, tensor subclasses) is
    not cached. ``func`` identifies the op: its overload, or (faster to hash) its
    ``oprecord.OpRecord``.
    """
    parts: list[Any] = [func, spec]
    seen: dict[int, int] = {}
    for i, a in enumerate(uflat):
        tp = type(a)
        if tp is torch.Tensor:
            parts.append((a.shape, a.stride(), a.dtype, seen.setdefault(id(a), i)))
        elif tp is float:
            parts.append(_FLOAT)
        elif tp is bool:
            parts.append(_TRUE if a else _FALSE)
        elif tp in _EXACT:
            parts.append(a)
        elif tp is complex:
            parts.append(_COMPLEX)
        else:
            return None
    return tuple(parts)


def out_key(out: Any) -> tuple | None:
    """Metadata of an op's result (the work counts its writes), or None if not cacheable."""
    tp = type(out)
    if tp is torch.Tensor:
        return (out.shape, out.stride(), out.dtype)
    if out is None:
        return ()
    if tp is tuple or tp is list:
        parts: list[Any] = []
        for o in out:
            t = type(o)
            if t is torch.Tensor:
                parts.append((o.shape, o.stride(), o.dtype))
            elif o is None or t is int or t is bool:
                parts.append((t, o))
            elif t is float:
                parts.append(_FLOAT)
            else:
                return None
        return tuple(parts)
    if tp is int or tp is bool or tp is float:
        return (tp,)
    return None


class SeenKey(tuple):
    """A compiled-signature key (``(name, signature)``) that hashes once.

    The core checks every eager kernel's key against the signatures it has compiled;
    a plain nested tuple would be hashed afresh on every op. Equal to (and hashing
    like) the plain tuple, so the core's set mixes both freely.
    """

    _hash: int

    def __new__(cls, items: tuple) -> SeenKey:
        self = super().__new__(cls, items)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self) -> int:
        return self._hash


@dataclass
class SignatureFacts:
    """Per-signature facts of an eager op: what dispatch charges, computed once.

    ``fallback``: why it runs on the host (None: on the device). ``results`` maps the
    result's metadata (``out_key``) to (kernel work, its cost on ``profile``, profile,
    compile signature, its ``SeenKey``); shared between calls, never mutated.
    """

    fallback: str | None
    results: dict[
        tuple, tuple[KernelWork | None, KernelCost | None, Any, tuple, SeenKey]
    ] = field(default_factory=dict)


_cache: LRUCache = LRUCache(maxsize=CACHE_SIZE)


def facts_for(key: tuple) -> SignatureFacts | None:
    """The cached facts of signature ``key`` (None on a miss)."""
    try:
        return _cache[key]
    except KeyError:
        return None


def remember(key: tuple, facts: SignatureFacts) -> SignatureFacts:
    """Keep ``facts`` for signature ``key`` (the least recently used one goes when full)."""
    _cache[key] = facts
    return facts


def cache_info() -> dict[str, int]:
    """Signatures cached and the bound (for benchmarks and debugging)."""
    return {"signatures": len(_cache), "maxsize": int(_cache.maxsize)}


def clear_cache() -> None:
    _cache.clear()


class Unwrapped:
    """Arguments unwrapped in one pass (see ``unwrap``)."""

    __slots__ = ("uargs", "ukwargs", "uflat", "spec", "same", "tensors", "index", "cpu_seen")

    def __init__(self) -> None:
        self.uargs: list = []
        self.ukwargs: dict = {}
        self.uflat: list = []
        self.spec: Any = None
        self.same: dict[int, Any] = {}
        self.tensors: list[torch.Tensor] = []
        self.index: int | None = None
        self.cpu_seen = False


def unwrap(args: tuple, kwargs: dict) -> Unwrapped | None:
    """Flatten, scan devices and unwrap in one pass, for the common argument shapes.

    Handles neuron tensors (exactly ``NeuronTensor``, with plain CPU buffers), plain
    CPU tensors, scalars and one level of lists/tuples. Returns None, leaving the op to
    the general path, for anything else: deeper nesting, dicts, devices (factory ops),
    tensors of two neuron devices (the general path raises the error), traced
    (fake/functional) tensors, other tensor subclasses.
    """
    u = Unwrapped()
    aspec = []
    uargs = u.uargs
    for a in args:
        tp = type(a)
        if tp is NeuronTensor and a._pending is None:  # the common case, inline
            b = a._buffer
            i = a._device_index
            if u.index is None:
                u.index = i
            elif i != u.index:
                return None
            if type(b) is not torch.Tensor:
                return None
            u.same[id(b)] = a
            u.uflat.append(b)
            u.tensors.append(b)
            uargs.append(b)
            aspec.append(None)
            continue
        if tp is float or tp is int or tp is bool or a is None:
            u.uflat.append(a)
            uargs.append(a)
            aspec.append(None)
            continue
        got = _argument(a, u)
        if got is None:
            return None
        uargs.append(got[0])
        aspec.append(got[1])
    kspec = []
    for k, a in kwargs.items():
        got = _argument(a, u)
        if got is None:
            return None
        u.ukwargs[k] = got[0]
        kspec.append((k, got[1]))
    u.spec = (tuple(aspec), tuple(kspec))
    return u


_GENERAL = _Marker("general path")


def _argument(a: Any, u: Unwrapped) -> tuple[Any, Any] | None:
    """One positional or keyword argument unwrapped, with its spec (``(type, length)``
    for a flat list or tuple, else None); None when it needs the general path."""
    tp = type(a)
    if tp is list or tp is tuple:
        items = []
        for x in a:
            v = _one(x, u)
            if v is _GENERAL:
                return None
            items.append(v)
        return tp(items), (tp, len(items))
    v = _one(a, u)
    if v is _GENERAL:
        return None
    return v, None


def _one(a: Any, u: Unwrapped) -> Any:
    tp = type(a)
    if tp is torch.Tensor:
        if a.device.type != "cpu":
            return _GENERAL
        if a.dim() != 0:
            u.cpu_seen = True
        b = a
    elif tp is NeuronTensor:
        i = a._device_index
        if u.index is None:
            u.index = i
        elif i != u.index:
            return _GENERAL
        b = a.buffer
        if type(b) is not torch.Tensor:
            return _GENERAL
    elif tp is list or tp is tuple or tp is dict or tp is torch.device:
        return _GENERAL
    elif isinstance(a, torch.Tensor):
        return _GENERAL
    else:
        u.uflat.append(a)
        return a
    u.same[id(b)] = a
    u.uflat.append(b)
    u.tensors.append(b)
    return b
