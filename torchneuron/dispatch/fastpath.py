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


_Tensor = torch.Tensor  # a global: read once per tensor argument of every op
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
    """Arguments unwrapped in one pass, with their signature key (see ``unwrap``)."""

    __slots__ = ("uargs", "ukwargs", "same", "tensors", "index", "key")

    def __init__(self, uargs: list, ukwargs: dict, same: dict[int, Any],
                 tensors: list[torch.Tensor], index: int | None, key: tuple | None) -> None:  # fmt: skip
        self.uargs = uargs
        self.ukwargs = ukwargs
        self.same = same  # id(buffer) -> the argument it came from
        self.tensors = tensors  # every tensor argument's buffer, in order
        self.index = index  # the neuron tensors' device (None: there are none)
        self.key = key  # ``signature_key`` of the unwrapped arguments (None: not cacheable)


class _General(Exception):
    """An argument the one-pass ``unwrap`` leaves to the general path."""


def unwrap(func: Any, args: tuple, kwargs: dict, keyed: bool = True) -> Unwrapped | None:
    """Unwrap, scan devices and build the signature key in one pass, for common arguments.

    Why one pass: unwrapping and keying each walked every argument, and together they
    were a large part of an eager op's Python cost. The key equals
    ``signature_key(func, uflat, spec)`` over the same leaves (the general path's key),
    so both paths share cache entries.

    ``keyed=False``: no key (``Unwrapped.key`` is None), for ops whose charge needs none.

    Handles neuron tensors (exactly ``NeuronTensor``, with plain CPU buffers, not
    pending), 0-dim CPU tensors (host scalars), scalars and one level of lists/tuples.
    Returns None, leaving the op to the general path, for anything else: deeper
    nesting, dicts, devices (factory ops), CPU tensors with dimensions (the general
    path checks which ops may take them), tensors of two neuron devices (it raises
    the error), traced (fake/functional) or pending tensors, other tensor subclasses.
    """
    parts: list[Any] = [func, None]  # the spec goes in second, once known
    same: dict[int, Any] = {}
    seen: dict[int, int] = {}
    tensors: list[torch.Tensor] = []
    state = [None, True]  # device index, cacheable
    uargs: list = []
    aspec: list = []
    try:
        for a in args:
            tp = type(a)
            if tp is NeuronTensor and a._pending is None:  # the common case, inline
                b = a._buffer
                if type(b) is not _Tensor:
                    return None
                i = a._device_index
                if state[0] is None:
                    state[0] = i
                elif i != state[0]:
                    return None
                bid = id(b)
                same[bid] = a
                if keyed:
                    parts.append(
                        (b.shape, b.stride(), b.dtype, seen.setdefault(bid, len(parts) - 2))
                    )
                tensors.append(b)
                uargs.append(b)
                aspec.append(None)
            elif tp is float:
                if keyed:
                    parts.append(_FLOAT)
                uargs.append(a)
                aspec.append(None)
            elif tp is int or a is None:  # dims, sizes' entries, absent optionals
                if keyed:
                    parts.append(a)
                uargs.append(a)
                aspec.append(None)
            elif tp is list or tp is tuple:
                items = []
                for x in a:
                    if type(x) is int:  # sizes, dims: their own key part, passed as is
                        if keyed:
                            parts.append(x)
                        items.append(x)
                    else:
                        items.append(_leaf(x, parts, same, seen, tensors, state))
                uargs.append(tp(items))
                aspec.append((tp, len(items)))
            else:
                uargs.append(_leaf(a, parts, same, seen, tensors, state))
                aspec.append(None)
        ukwargs: dict = {}
        kspec = []
        for k, a in kwargs.items():
            tp = type(a)
            if tp is list or tp is tuple:
                items = [_leaf(x, parts, same, seen, tensors, state) for x in a]
                ukwargs[k] = tp(items)
                kspec.append((k, (tp, len(items))))
            else:
                ukwargs[k] = _leaf(a, parts, same, seen, tensors, state)
                kspec.append((k, None))
    except _General:
        return None
    if not (keyed and state[1]):
        return Unwrapped(uargs, ukwargs, same, tensors, state[0], None)
    parts[1] = (tuple(aspec), tuple(kspec))
    return Unwrapped(uargs, ukwargs, same, tensors, state[0], tuple(parts))


def _leaf(
    a: Any, parts: list, same: dict[int, Any], seen: dict[int, int],
    tensors: list[torch.Tensor], state: list,
) -> Any:  # fmt: skip
    """One leaf unwrapped; its key part appended to ``parts`` (as ``signature_key``
    makes it); raises ``_General`` when the general path must take the op."""
    tp = type(a)
    if tp is NeuronTensor:
        if a._pending is not None:
            raise _General
        b = a._buffer
        i = a._device_index
        if state[0] is None:
            state[0] = i
        elif i != state[0]:
            raise _General
        if type(b) is not _Tensor:
            raise _General
        bid = id(b)
        same[bid] = a
    elif tp is _Tensor:
        if a.device.type != "cpu" or a.dim() != 0:
            raise _General
        b = a
        bid = id(b)
        same[bid] = a
    elif tp is float:
        parts.append(_FLOAT)
        return a
    elif tp is bool:
        parts.append(_TRUE if a else _FALSE)
        return a
    elif tp is list or tp is tuple or tp is dict or tp is torch.device:
        raise _General
    elif isinstance(a, torch.Tensor):
        raise _General
    else:
        if tp in _EXACT:
            parts.append(a)
        elif tp is complex:
            parts.append(_COMPLEX)
        else:
            parts.append(None)
            state[1] = False  # SymInts, generators, ...: not cacheable
        return a
    parts.append((b.shape, b.stride(), b.dtype, seen.setdefault(bid, len(parts) - 2)))
    tensors.append(b)
    return b
