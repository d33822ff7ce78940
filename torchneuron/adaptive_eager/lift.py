"""Lifting changing float scalars into graph inputs, so a region replays with new values.

An optimizer passes Python floats that change every step into device ops: AdamW's bias
corrections (``exp_avg_sq.sqrt() / bias_correction2_sqrt``, ``addcdiv_(..., value=
-step_size)``), a scheduler's learning rate (``add_(grad, alpha=-lr)``). Recorded as
constants, each step is a new region. When instances of a region differ *only* in top-level
float arguments (same ops, dataflow, tensor metadata: the same *skeleton*), the positions
that changed are *lifted*: the region's signature holds ``("lifted", n)`` there, the guard
accepts any float there (never an int or a bool), the captured graph takes scalar ``n`` as
a 0-d tensor input, and every replay passes the current values.

Exactness decides what may be lifted; anything not in the table below is refused (the
region stays unlifted and the runtime falls back to the common prefix):

- a float as the ``other`` operand of ``add/sub/mul/div.Tensor`` (and in-place forms) of a
  float32 or float64 tensor: ATen wraps it as a number that does not promote, and rounds it
  to the tensor's dtype; a 0-d tensor of that dtype gives the same dtype and the same bits;
- a Scalar argument (``alpha`` of add/sub, ``value`` of addcmul/addcdiv, ``weight`` of
  lerp) when every tensor operand has one dtype, float32 or float64 (ATen computes those in
  the dtype itself): the op is rewritten to tensor arithmetic in the order of ATen's CPU
  kernel (``self + value * t1 / t2`` for addcdiv), in-place forms writing back into
  ``self``. Half, bfloat16, integer and bool operands promote or round differently: refused.
"""

from __future__ import annotations

import math
from itertools import compress, count, repeat
from operator import is_not, itemgetter, ne
from typing import Any

import torch
import torch.fx as fx

from torchneuron.adaptive_eager.signature import Call, OpSig, OpsKey, Static

__all__ = ["Lifter", "Lifted", "block_identity", "may_lift", "skeleton", "floats_only_differ", "blind_key", "sites", "lifted_dtypes", "guard", "accept", "scalar_inputs", "emit",
           "MARK"]

aten = torch.ops.aten
MARK = "lifted"  # ("lifted", n) stands for lifted scalar n in a region's signature
_FLOATS = (torch.float32, torch.float64)
_KEEP_SKELETONS = 256  # skeletons remembered (oldest forgotten first)
_MAX = {d: torch.finfo(d).max for d in _FLOATS}  # the largest finite value of each

# Tensor-typed operand given a Python float: the 0-d tensor goes straight into the op.
_OTHER = {aten.add.Tensor, aten.add_.Tensor, aten.sub.Tensor, aten.sub_.Tensor,
          aten.mul.Tensor, aten.mul_.Tensor, aten.div.Tensor, aten.div_.Tensor}
# Scalar-typed arguments, rewritten: op -> argument name.
_SCALAR = {
    aten.add.Tensor: "alpha", aten.add_.Tensor: "alpha",
    aten.sub.Tensor: "alpha", aten.sub_.Tensor: "alpha",
    aten.addcmul.default: "value", aten.addcmul_.default: "value",
    aten.addcdiv.default: "value", aten.addcdiv_.default: "value",
    aten.lerp.Scalar: "weight", aten.lerp_.Scalar: "weight",
}
_INPLACE = {aten.add_.Tensor, aten.sub_.Tensor, aten.addcmul_.default, aten.addcdiv_.default,
            aten.lerp_.Scalar}


class Lifted:
    """A lifted scalar's graph node, as it appears in an argument structure being built."""

    __slots__ = ("node",)

    def __init__(self, node: fx.Node) -> None:
        self.node = node


def _top(desc: Any) -> tuple[tuple, tuple]:
    """(positional descriptions, keyword (name, description) pairs) of an op's arguments."""
    args_d, kw_d = desc[1]
    return args_d[1], kw_d[1]


def _floats(static: Call | Static) -> list[tuple[tuple, str]]:
    """Top-level float arguments of an entry: [(where, repr)], where ("a", p) or ("k", name)."""
    args, kws = _top(static.args)
    out = [(("a", p), d[1]) for p, d in enumerate(args) if d[0] == "float"]
    out += [(("k", k), d[1]) for k, d in kws if d[0] == "float"]
    return out


def _replace(desc: Any, subs: dict) -> tuple:
    args, kws = _top(desc)
    return ("U", (("U", tuple(subs.get(("a", p), d) for p, d in enumerate(args))),
                  ("K", tuple((k, subs.get(("k", k), d)) for k, d in kws))))


def _name(func: Any, where: tuple) -> str:
    if where[0] == "k":
        return where[1]
    args = func._schema.arguments
    return args[where[1]].name if where[1] < len(args) else ""


def liftable(func: Any, where: tuple, static: Call | Static) -> torch.dtype | None:
    """The dtype a float at ``where`` of this op is lifted as, or None (refused)."""
    if func not in _SCALAR and func not in _OTHER:
        return None
    name = _name(func, where)
    args, kws = _top(static.args)
    named: dict[str, Any] = {}
    for p, d in enumerate(args):
        named[_name(func, ("a", p))] = d
    named.update(dict(kws))
    dtypes = {d[1].dtype for d in named.values() if d[0] == "T"}
    if len(dtypes) != 1:
        return None
    (dtype,) = dtypes
    if dtype not in _FLOATS:
        return None
    if func in _OTHER and name == "other":
        return dtype if named.get("self", ("",))[0] == "T" else None
    if _SCALAR.get(func) == name:
        needs = {"alpha": ("self", "other"), "value": ("self", "tensor1", "tensor2"),
                 "weight": ("self", "end")}[name]
        return dtype if all(named.get(n, ("",))[0] == "T" for n in needs) else None
    return None


def _blanked(sigs: tuple) -> tuple | None:
    """``sigs`` with its float values blanked when it holds floats and every one could be
    lifted, else None."""
    skel, floats, where = _skeleton(sigs)
    if floats and all(liftable(sigs[i].func, w, sigs[i].static) is not None for i, w in where):
        return skel
    return None


def block_identity(sigs: tuple) -> tuple:
    """What tells a block apart from step to step: ``sigs`` with its float values blanked
    when every float in it could be lifted (a block that changes only there is the same
    block with new scalars), else ``sigs`` itself."""
    return _blanked(sigs) or sigs


def blind_key(func: Any, static: Static, outs: tuple) -> int:
    """A recorded op's period key with the floats it could lift blanked: the last op of
    a lifted region (AdamW's ``addcdiv_``) is found at a cut whatever its step's value.
    Asked once per distinct op (``recorder._op_of`` keeps it)."""
    fl = _floats(static)
    subs = {w: ("float", None) for w, _ in fl if liftable(func, w, static) is not None}
    blanked = _with_args(static, _replace(static.args, subs)) if subs else static
    return hash((func, blanked, outs))


def _with_args(static: Static, args: tuple) -> Static:
    """``static`` with the argument description ``args``."""
    return Static(args, static.grad, static.autocast, static.result)


def skeleton(sigs: tuple) -> tuple:
    """``sigs`` with every top-level float value blanked: instances of a region that
    agree here differ at most in floats the lifter may lift."""
    return _skeleton(sigs)[0]


def floats_only_differ(static: Call, recorded: Static) -> bool:
    """Whether an op's static description differs from a recorded one (``lifted`` marks
    and all) in top-level float values alone: a scalar the lifter learns to lift."""
    def blank(desc: Any) -> tuple:
        args, kws = _top(desc)
        subs = {("a", p): None for p, d in enumerate(args) if d[0] in ("float", MARK)}
        subs.update({("k", k): None for k, d in kws if d[0] in ("float", MARK)})
        return _replace(desc, subs)
    return (static.grad == recorded.grad and static.autocast == recorded.autocast
            and blank(static.args) == blank(recorded.args))


def may_lift(sigs: tuple) -> bool:
    """Whether ``sigs`` holds float scalars that could all be lifted (such a region may
    come back with new values next step: AdamW's update does, constant-lr SGD does not)."""
    return _blanked(sigs) is not None


class Lifter:
    """Per skeleton (a region's signature with its top-level float values blanked): the
    float values last seen and the positions seen changing."""

    def __init__(self) -> None:
        self.state: dict[tuple, tuple[list[str], frozenset[int], bool]] = {}

    def lift(self, sigs: tuple) -> tuple[tuple | None, int]:
        """(``sigs`` with the positions seen changing lifted, or None: nothing to lift, or
        a changing float that cannot be lifted exactly; and how many earlier instances the
        lifted signature also stands for: 1 when it is new, the previous instance)."""
        skel, floats, where = _skeleton(sigs)
        if not floats:
            return None, 0
        st = self.state.pop(skel, None)
        if st is None:
            self.state[skel] = (floats, frozenset(), False)
            self._bound()
            return None, 0
        last, mask, refused = st
        # (the positions whose values differ, found in C: a window of AdamW's ops is new
        # every step, and has a float at most of them)
        if len(last) != len(floats):
            raise ValueError(f"a skeleton's floats changed in number ({len(last)} then "
                             f"{len(floats)}): equal skeletons blank the same floats")
        changed = set(compress(count(), map(ne, last, floats)))
        grew = bool(changed - mask)
        if grew:
            mask = mask | changed
            refused = refused or any(
                liftable(sigs[where[k][0]].func, where[k][1], sigs[where[k][0]].static) is None
                for k in changed)
        self.state[skel] = (floats, mask, refused)
        if refused or not mask:
            return None, 0
        return _apply(sigs, [where[k] for k in sorted(mask)]), int(grew)

    def known(self, sigs: tuple) -> tuple | None:
        """``sigs`` lifted as the lifter lifts it now (without counting it), or None."""
        skel, floats, where = _skeleton(sigs)
        st = self.state.get(skel) if floats else None
        if st is None or st[2] or not st[1]:
            return None
        return _apply(sigs, [where[k] for k in sorted(st[1])])

    def _bound(self) -> None:
        while len(self.state) > _KEEP_SKELETONS:
            self.state.pop(next(iter(self.state)))


def _skeleton(sigs: tuple) -> tuple[tuple, list[str], list[tuple[int, tuple]]]:
    """(skeleton, float values, their (entry, where)) of ``sigs``; the lists are shared,
    never changed.

    Remembered per signature by the identities of its ops (the recorder interns them):
    every closed window asks, and a training loop closes the same windows every step."""
    ids = tuple(map(id, sigs))
    got = _SKELETONS.get(ids)
    if got is not None:
        return got[1]
    floats, where = [], []
    # (``_blank_of`` of each op, its kept answers found in C: the window of a step whose
    # floats change is new every step, its ops are not)
    gots = list(map(_BLANKS.get, ids, repeat(_NONE_KEPT)))
    for i in compress(count(), map(is_not, map(_OP_OF, gots), sigs)):  # (not kept)
        gots[i] = _blank_of(sigs[i])
    # (the ops with floats, found in C: most ops of a window have none)
    for i in compress(count(), map(_FLOATS_OF, gots)):
        for w, r in gots[i][1]:
            floats.append(r)
            where.append((i, w))
    out = (_Skeleton(map(_BLANK_OF, gots)), floats, where)
    if len(_SKELETONS) >= _KEEP_SKELETONS:
        _SKELETONS.clear()
    _SKELETONS[ids] = (sigs, out)  # (``sigs`` kept: no other object takes their ids)
    return out


class _Skeleton(OpsKey):
    """A skeleton: a tuple of ops that hashes once, from its ops' hashes kept per op
    (``signature.OpsKey``).

    Why: the lifter looks its state up by skeleton (``Lifter.lift``: a pop and a store
    for every closed window, every step), and a tuple hashes every op's description down
    to the shapes each time: two such hashes of a training step's ops cost about 3% of
    an eager step's host instructions. The skeleton of a step is the same object every
    step (``_skeleton`` keeps it), so its hash is computed once. A step whose floats
    change (AdamW's bias corrections) is a new signature, so a new skeleton, every step,
    but of the same blanked ops (``_blank_of``: one object per value), whose hashes are
    kept (a hash of HF GPT-2's training step cost about 1.8M instructions, every step).
    The lifter's table holds only skeletons."""


def _blank_of(sig: OpSig) -> tuple[OpSig, list, OpSig]:
    """(sig, its top-level floats (``_floats``), sig with them blanked), remembered per
    op (by identity, the op kept); the blanked op is one object per value, so that the
    skeletons of two steps are tuples of the same objects."""
    got = _BLANKS.get(id(sig))
    if got is not None and got[0] is sig:
        return got
    fl = _floats(sig.static)
    blank = sig
    if fl:
        b = _replace(sig.static.args, {w: ("float", None) for w, _ in fl})
        blank = OpSig(sig.func, _with_args(sig.static, b), sig.refs, sig.outs)
        blank = _BLANKED.setdefault(blank, blank)
        if len(_BLANKED) >= _KEEP_BLANKS:
            _BLANKED.clear()
    if len(_BLANKS) >= _KEEP_BLANKS:
        _BLANKS.clear()
    got = _BLANKS[id(sig)] = (sig, fl, blank)
    return got


_NONE_KEPT = (None, None, None)  # ``_BLANKS``' answer for an op without one
_OP_OF = itemgetter(0)  # the op a ``_blank_of`` answer is of
_FLOATS_OF = itemgetter(1)  # a ``_blank_of`` answer's floats
_BLANK_OF = itemgetter(2)  # a ``_blank_of`` answer's blanked op
_SKELETONS: dict[tuple, tuple] = {}  # ids of a signature's ops -> (sigs, ``_skeleton``)
_BLANKS: dict[int, tuple] = {}  # id of an op -> ``_blank_of`` it
_BLANKED: dict[OpSig, OpSig] = {}  # a blanked op -> the one object kept for its value
_KEEP_BLANKS = 1 << 16


def _apply(sigs: tuple, positions: list[tuple[int, tuple]]) -> tuple:
    """``sigs`` with the floats at ``positions`` lifted; remembered per signature (by the
    identities of its ops, as ``_skeleton``) and positions: a closed window is lifted
    (``Lifter.lift``) and then looked up again (``Lifter.known``, at every cut), and each
    lifted op is a new ``OpSig`` hashed down to the shapes to be interned."""
    key = (tuple(map(id, sigs)), tuple(positions))
    got = _APPLIED.get(key)
    if got is not None:
        return got[1]
    out = _lifted(sigs, positions)
    if len(_APPLIED) >= _KEEP_SKELETONS:
        _APPLIED.clear()
    _APPLIED[key] = (sigs, out)  # (``sigs`` kept: no other object takes their ids)
    return out


_APPLIED: dict[tuple, tuple] = {}  # (ids of a signature's ops, positions) -> (sigs, lifted)


def _lifted(sigs: tuple, positions: list[tuple[int, tuple]]) -> tuple:
    by_entry: dict[int, dict] = {}
    for n, (i, w) in enumerate(positions):
        by_entry.setdefault(i, {})[w] = (MARK, n)
    out = list(sigs)
    for i, subs in by_entry.items():
        sig = sigs[i]
        # the lifted op is its blanked op (one object per value) with each float either
        # marked or its value: found by those, without building it and hashing it down
        # to the shapes (AdamW's window is new every step, its lifted ops are not)
        _, fl, blank = _blank_of(sig)
        key = (id(blank), tuple(subs.get(w, r) for w, r in fl))
        got = _LIFTED_BY.get(key)
        if got is not None and got[0] is blank:
            out[i] = got[1]
            continue
        lifted = OpSig(sig.func, _with_args(sig.static, _replace(sig.static.args, subs)),
                       sig.refs, sig.outs)
        # one object per value (as the recorder's ops): a region lifted again next step
        # is then found by the identities of its ops (``signature.region_key``)
        if len(_LIFTED) >= _KEEP_BLANKS or len(_LIFTED_BY) >= _KEEP_BLANKS:
            _LIFTED.clear()
            _LIFTED_BY.clear()
            _APPLIED.clear()  # (what it kept is interned no more)
        out[i] = lifted = _LIFTED.setdefault(lifted, lifted)
        _LIFTED_BY[key] = (blank, lifted)  # (the blanked op kept: its id is its own)
    return tuple(out)


_LIFTED: dict[OpSig, OpSig] = {}  # a lifted op -> the one object kept for its value
# (id of a blanked op, each float's mark or value) -> (the blanked op, ``_LIFTED``'s op)
_LIFTED_BY: dict[tuple, tuple[OpSig, OpSig]] = {}


def sites(sigs: tuple) -> tuple[dict[int, tuple], list[torch.dtype]]:
    """Per entry with lifted scalars, ((where, n), ...); and each lifted scalar's dtype."""
    at: dict[int, tuple] = {}
    dtypes: dict[int, torch.dtype] = {}
    for i, (func, static, _refs, _outs) in enumerate(sigs):
        args, kws = _top(static.args)
        found = [(("a", p), d[1]) for p, d in enumerate(args) if d[0] == MARK]
        found += [(("k", k), d[1]) for k, d in kws if d[0] == MARK]
        if found:
            at[i] = tuple(found)
            for w, n in found:
                dt = liftable(func, w, static)
                if dt is None:  # the lifter never makes these; refuse rather than guess
                    raise ValueError(f"{func}: a lifted scalar at {w} cannot be lifted exactly")
                dtypes[n] = dt
    return at, [dtypes[n] for n in range(len(dtypes))]


def lifted_dtypes(sigs: tuple) -> list[torch.dtype]:
    return sites(sigs)[1]


def guard(static: Call, static_r: Call, found: tuple, values: dict[int, float],
          dtypes: list[torch.dtype]) -> bool:
    """Whether a live op's static description matches a recorded one with lifted scalars:
    the same everywhere else, a float at each lifted position, finite values within the
    dtype's range (ATen raises converting a larger Scalar: eager must run to raise it).
    Stores the values."""
    args, kws = _top(static.args)
    kwd = dict(kws)
    subs, got = {}, []
    for w, n in found:
        d = args[w[1]] if w[0] == "a" and w[1] < len(args) else kwd.get(w[1]) if w[0] == "k" else None
        if d is None or d[0] != "float":
            return False
        subs[w] = (MARK, n)
        got.append((n, d[1]))
    if (_replace(static.args, subs), static.grad, static.autocast) != static_r:
        return False
    return accept(got, values, dtypes)


def accept(got: list[tuple[int, str]], values: dict[int, float],
           dtypes: list[torch.dtype]) -> bool:
    """Whether the floats ``got`` ((n, repr) for lifted scalar n) can be lifted: finite
    values within the dtype's range (ATen raises converting a larger Scalar: eager must
    run to raise it). Stores the values."""
    for n, r in got:
        v = float(r)
        if math.isfinite(v) and abs(v) > (_MAX.get(dtypes[n]) or torch.finfo(dtypes[n]).max):
            return False
        values[n] = v
    return True


def scalar_inputs(dtypes: list[torch.dtype], values: dict[int, float]) -> list[torch.Tensor]:
    """The 0-d CPU tensors a replay passes for its lifted scalars.

    One ``torch.tensor`` per dtype, unbound into 0-d views: the same conversion of each
    value as ``torch.tensor(value, dtype=d)`` (an optimizer lifts dozens of scalars, and
    a tensor apiece cost several µs each, every replay). The graph only reads them."""
    if not dtypes:
        return []
    first = dtypes[0]
    if all(d is first for d in dtypes):
        return list(torch.tensor([values[n] for n in range(len(dtypes))], dtype=first).unbind())
    out: list[torch.Tensor] = [None] * len(dtypes)  # type: ignore[list-item]
    for d in set(dtypes):
        ns = [n for n, dn in enumerate(dtypes) if dn is d]
        for n, t in zip(ns, torch.tensor([values[n] for n in ns], dtype=d).unbind(), strict=True):
            out[n] = t
    return out


def _plain(x: Any) -> Any:
    return x.node if isinstance(x, Lifted) else x


def emit(g: fx.Graph, func: Any, args: list, kwargs: dict) -> fx.Node:
    """The graph nodes of one op with lifted scalars (``Lifted`` in its arguments)."""
    named = dict(kwargs)
    for p, a in enumerate(args):
        named[func._schema.arguments[p].name] = a
    scalar = _SCALAR.get(func)
    if scalar is None or not isinstance(named.get(scalar), Lifted):
        # only the Tensor-typed ``other`` is lifted: the op takes the 0-d tensor as is
        return g.call_function(func, tuple(_plain(a) for a in args),
                               {k: _plain(v) for k, v in kwargs.items()})
    s = named[scalar].node
    call = g.call_function
    self_ = named["self"]
    if scalar == "alpha":
        other = _plain(named["other"])
        scaled = call(aten.mul.Tensor, (other, s))  # ATen: self + alpha * other
        return call(func, (self_, scaled))  # the same overload, alpha 1
    if scalar == "value":
        t1, t2 = named["tensor1"], named["tensor2"]
        scaled = call(aten.mul.Tensor, (t1, s))  # ATen: self + value * t1 {*,/} t2
        combine = aten.mul.Tensor if func in (aten.addcmul.default, aten.addcmul_.default) \
            else aten.div.Tensor
        rhs = call(combine, (scaled, t2))
        return call(aten.add_.Tensor if func in _INPLACE else aten.add.Tensor, (self_, rhs))
    # lerp: |w| < 0.5 ? self + w * (end - self) : end - (end - self) * (1 - w)
    end = named["end"]
    diff = call(aten.sub.Tensor, (end, self_))
    small = call(aten.lt.Scalar, (call(aten.abs.default, (s,)), 0.5))
    low = call(aten.add.Tensor, (self_, call(aten.mul.Tensor, (s, diff))))
    high = call(aten.sub.Tensor, (end, call(aten.mul.Tensor, (diff, call(aten.rsub.Scalar, (s, 1))))))
    out = call(aten.where.self, (small, low, high))
    if func in _INPLACE:
        return call(aten.copy_.default, (self_, out))
    return out

