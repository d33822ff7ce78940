"""Per-op guards of a replay, prepared once per region: the cheap check of each op.

While a region replays, every op is checked against the op recorded at its position:
overload, tensor metadata, scalar arguments, grad mode, autocast state (here), and
dataflow (``replay``, which knows the pending values). The general check describes the
op's arguments (``recorder.static_of``) and compares that description with the recorded
one; it builds a nested tuple per argument, per op, per replay. A guard is the recorded
description turned, once, into what to compare: for each argument, the expected type
and value of a scalar, the expected sizes, strides, offset and dtype of a tensor, the
expected length and items of a flat list. ``match`` walks the arguments against it and
builds nothing but the argument template.

``match`` is sound, never lenient: it accepts an op only if ``static_of`` would describe
it exactly as recorded (the exact Python types included; a subclass of ``float`` or of
``NeuronTensor`` is left to the general check), except where the region lifted a float
to an input: there it takes any float, as ``lift.guard`` does, and hands the values on
for ``lift.accept``'s range check. Every tensor's metadata is compared, the replay's own
pending values included. Anything it does not accept, the caller checks the general way,
so a guard never refuses an op the general check would take either.

Most ops take only tensors, ints, bools, None, strings, floats and flat lists of those:
their argument template is the same on every call (a tensor's slot is its position
among the tensor arguments, and an int or a float equal to the recorded one, by type
and repr, *is* the recorded one), but for lifted floats, NaNs, dtypes and devices. For
those ops the guard holds the template, built once (``OpGuard.template``), and
``match`` only checks, in one flat loop over the arguments, then puts the call's own
values, if any, into a copy of the template: no per-argument calls, no rebuilding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from torchneuron.adaptive_eager.issued import may_raise_later
from torchneuron.adaptive_eager.lift import MARK
from torchneuron.adaptive_eager.recorder import slot
from torchneuron.adaptive_eager.signature import (
    Call,
    InputRef,
    NewOut,
    OpSig,
    SameOut,
    Slot,
    describe,
)
from torchneuron.device.tensor import NeuronTensor
from torchneuron.dispatch.opfacts import op_facts

__all__ = ["OpGuard", "Output", "guards_of", "match"]

# Expected kinds of one argument leaf.
_TENSOR, _FLOAT, _EXACT, _NONE, _SEQ, _GENERAL, _LIFTED = range(7)
_EXACT_TYPES = {"int": int, "bool": bool, "str": str}
_FAIL = object()

aten = torch.ops.aten


@dataclass(slots=True)
class Output:
    """How a deferred op hands out output ``k``: the argument it is (``same``), or a new
    pending tensor of value ``ik`` with these sizes, strides, offset and dtype."""

    same: int | None  # tensor argument j for an in-place op's output
    ik: tuple[int, int] | None  # (op, output) of the value, one tuple object per region
    meta: tuple | None  # (sizes, strides, offset, dtype) of the pending tensor
    nbytes: int  # storage bytes of a new value (0 for views)
    # ``tensor.pending_layout`` of ``meta`` on device ``layout_index``, made at first use
    layout: dict | None = None
    layout_index: int = -1


@dataclass(slots=True)
class OpGuard:
    """What the op at one position of a region must be, prepared from its signature."""

    func: Any
    static: Call  # what ``static_of`` gives for the recorded call
    flow: tuple  # recorded dataflow per tensor argument: (i, k) a value, or an input slot
    grad: bool
    autocast: bool
    args: tuple | None  # expected arguments (see ``_compile``), None: general check only
    kwargs: tuple | None  # ((name, expected), ...) in recorded order
    written: tuple[tuple[int, str], ...]  # (position, name) of arguments the op writes
    outputs: tuple[Output | None, ...]
    struct: str  # "single", "tuple", "list" or "none"
    check_indices: bool  # the op's index values are checked before deferring
    raises_later: bool  # its values may make it raise at the region's end (``issued``)
    # the flat check (``_flat``): None when an argument needs ``_arg``'s general walk
    nargs: int = 0
    kwnames: tuple[str, ...] = ()  # keyword names, in recorded order
    flat: tuple | None = None  # expectation per positional then keyword argument
    template: tuple | None = None  # (args, kwargs) template with the recorded floats
    floats: tuple[int, ...] = ()  # positions in ``flat`` whose value is the call's
    check: Any = None  # the flat check, generated (``_generate``)
    # where the written arguments are in a call the flat check took (its arity and
    # keyword names are the recorded ones): an int position in ``args`` or a keyword
    write_at: tuple[int | str, ...] | None = None
    new: Output | None = None  # the one output of a "single" op that is a new value
    # (k, ik) of each output that is a value of the region (not None, not an argument):
    # what a deferred run of the op hands out (``deferred.run``)
    news: tuple[tuple[int, tuple[int, int]], ...] = ()
    bind: Any = None  # the dataflow check, generated by the replay (``dataflow``)
    # ``template`` is the call's tensor arguments in order, positional, and nothing else
    # (``add(a, b)``): its arguments rebuilt are the tensors as a tuple (``deferred.run``)
    plain: bool = False
    # how a deferred run rebuilds the call from the buffers when its template is
    # ``template``: True if ``plain`` (the tensors as a tuple), else a function of the
    # buffers generated at its first run (``deferred._rebuilder``), None until then
    rebuild: Any = None
    # an argument is a float the region lifted (``_LIFTED``): only then may a check
    # append to its ``lifted`` list
    lifts: bool = False


def guards_of(region: Any, index_checked: Any) -> list[OpGuard]:
    """The guards of ``region``'s ops, prepared at its first replay and kept on it.
    ``index_checked``: the ops whose index values are checked before deferring."""
    guards = region.guards
    if guards is None:
        iks: dict[tuple[int, int], tuple[int, int]] = {}  # one (i, k) tuple per value
        guards = region.guards = [_guard(i, sig, index_checked, iks)
                                  for i, sig in enumerate(region.sigs)]
    return guards


def _guard(i: int, sig: OpSig, index_checked: Any,
           iks: dict[tuple[int, int], tuple[int, int]] | None = None) -> OpGuard:
    """The guard of op ``i``; ``iks`` gives each value of the region one (i, k) tuple,
    its producer's and its users' alike (``dataflow`` compares them by identity)."""
    func, static, refs, outs = sig
    if iks is None:
        iks = {}
    flow = tuple(r.index if isinstance(r, InputRef) else iks.setdefault(r.value, r.value)
                 for r in refs)
    args_desc, kwargs_desc = static.args[1]  # ("U", (("U", args), ("K", kwargs)))
    args = tuple(_compile_top(d) for d in args_desc[1])
    kwargs = tuple((k, _compile_top(d)) for k, d in kwargs_desc[1])
    outputs: list[Output | None] = []
    for k, out in enumerate(outs):
        if out is None:
            outputs.append(None)
        elif isinstance(out, SameOut):
            outputs.append(Output(out.arg, None, None, 0))
        else:
            outputs.append(Output(None, iks.setdefault((i, k), (i, k)), out.meta,
                                  out.nbytes if isinstance(out, NewOut) else 0))
    g = OpGuard(func, static.call, flow, static.grad, static.autocast, args, kwargs,
                op_facts(func).written, tuple(outputs), static.result, func in index_checked,
                may_raise_later(func))
    g.lifts = any(e[0] == _LIFTED for e in args) or any(e[0] == _LIFTED for _, e in kwargs)
    if g.struct == "single" and outputs[0] is not None and outputs[0].same is None:
        g.new = outputs[0]
    g.news = tuple((k, o.ik) for k, o in enumerate(outputs)
                   if o is not None and o.same is None)
    _flatten(g)
    return g


def _flatten(g: OpGuard) -> None:
    """Prepare ``g``'s flat check and constant template, if every argument is a plain
    leaf (tensor, exact scalar, None, float, lifted float, dtype, layout, memory format,
    device) or a flat sequence of tensors, exact scalars and Nones; otherwise leave
    ``g.flat`` None (``_match_walk`` decides)."""
    expected = g.args + tuple(e for _, e in g.kwargs)  # type: ignore[operator]
    n_tensors = 0
    temps: list[Any] = []
    floats = []
    for p, e in enumerate(expected):
        kind = e[0]
        if kind == _TENSOR:
            temps.append(slot(n_tensors))
            n_tensors += 1
        elif kind == _EXACT:
            temps.append(e[2])
        elif kind == _NONE:
            temps.append(None)
        elif kind == _FLOAT and e[1] != "nan":
            # a float whose repr is the recorded one *is* the recorded float (repr round-
            # trips every value but NaN's sign and payload, which the call's NaN keeps)
            temps.append(float(e[1]))
        elif kind in (_FLOAT, _LIFTED) or (kind == _GENERAL and e[1][0] in ("E", "D")):
            temps.append(None)  # the call's value (lifted float, dtype, device...) goes here
            floats.append(p)
        elif kind == _SEQ and all(x[0] in (_TENSOR, _EXACT, _NONE) for x in e[2]):
            items = []
            for x in e[2]:
                if x[0] == _TENSOR:
                    items.append(slot(n_tensors))
                    n_tensors += 1
                else:
                    items.append(x[2] if x[0] == _EXACT else None)
            temps.append(items if e[1] is list else tuple(items))
        else:
            return
    nargs = len(g.args)  # type: ignore[arg-type]
    g.nargs = nargs
    g.kwnames = tuple(name for name, _ in g.kwargs)  # type: ignore[union-attr]
    g.flat = expected
    g.template = (tuple(temps[:nargs]), dict(zip(g.kwnames, temps[nargs:], strict=True)))
    g.plain = not g.kwnames and not floats and all(
        type(t) is Slot and t.j == j for j, t in enumerate(temps))
    g.rebuild = True if g.plain else None
    g.floats = tuple(floats)
    g.check = _generate(g)
    g.write_at = tuple(pos if pos < nargs else name for pos, name in g.written
                       if pos < nargs or name in g.kwnames)


def _compile_leaf(d: tuple) -> tuple | None:
    kind = d[0]
    if kind == "T":
        m = d[1]
        return (_TENSOR, m.shape, m.stride, m.offset, m.dtype)
    if kind == "float":
        # (kind, repr, value): a float equal to a nonzero recorded value has its repr;
        # zero (-0.0 and 0.0 are equal) and NaN are compared by repr (value None)
        v = float(d[1])
        return (_FLOAT, d[1], v if v == v and v != 0.0 else None)
    if kind in _EXACT_TYPES:
        return (_EXACT, _EXACT_TYPES[kind], d[1])
    if kind == "NoneType":
        return (_NONE,)
    return None


def _compile_top(d: tuple) -> tuple:
    """The expectation for a top-level argument: lifted scalars are only there."""
    if d[0] == MARK:
        return (_LIFTED, d[1])
    return _compile(d)


def _compile(d: tuple) -> tuple:
    """The expectation for one argument recorded as description ``d``."""
    leaf = _compile_leaf(d)
    if leaf is not None:
        return leaf
    if d[0] in ("L", "U"):
        items = [_compile_leaf(x) for x in d[1]]
        if all(x is not None for x in items):
            return (_SEQ, list if d[0] == "L" else tuple, tuple(items))
    return (_GENERAL, d)


def _leaf(e: tuple, a: Any, tensors: list[torch.Tensor], lifted: list) -> Any:
    """The template of argument leaf ``a`` if it is what ``e`` expects, else ``_FAIL``."""
    kind = e[0]
    if kind == _TENSOR:
        if (type(a) is not NeuronTensor or a.dtype is not e[4] or a.storage_offset() != e[3]
                or a.stride() != e[2] or a.shape != e[1]):
            return _FAIL
        tensors.append(a)
        return slot(len(tensors) - 1)
    if kind == _FLOAT:
        # repr: what the description holds (keeps -0.0 apart from 0.0, nan equal to nan);
        # for any other value, equality says the same, without formatting the float
        if type(a) is not float:
            return _FAIL
        v = e[2]
        return a if (repr(a) == e[1] if v is None else a == v) else _FAIL
    if kind == _EXACT:
        return a if type(a) is e[1] and a == e[2] else _FAIL
    if kind == _NONE:
        return None if a is None else _FAIL
    if kind == _LIFTED:  # what ``lift.guard`` takes: a float, whatever its value
        if type(a) is not float:
            return _FAIL
        lifted.append((e[1], repr(a)))
        return a
    return _FAIL


def _arg(e: tuple, a: Any, tensors: list[torch.Tensor], lifted: list) -> Any:
    kind = e[0]
    if kind == _SEQ:
        tp, items = e[1], e[2]
        if type(a) is not tp or len(a) != len(items):
            return _FAIL
        out = []
        for x, ex in zip(a, items, strict=True):
            t = _leaf(ex, x, tensors, lifted)
            if t is _FAIL:
                return _FAIL
            out.append(t)
        return out if tp is list else tuple(out)
    if kind == _GENERAL:
        try:
            d, t = describe(a, tensors)
        except Exception:  # noqa: BLE001 - not what was recorded, whatever it is
            return _FAIL
        return t if d == e[1] else _FAIL
    return _leaf(e, a, tensors, lifted)


_grad_enabled = torch.is_grad_enabled
_autocast_enabled = torch.is_autocast_enabled


def match(g: OpGuard, args: tuple, kwargs: dict, tensors: list[torch.Tensor],
          lifted: list[tuple[int, str]] | None = None) -> Any:
    """The argument template of a call that ``static_of`` describes exactly as ``g``'s
    recorded op (its tensor arguments appended to ``tensors`` in the same order), or
    None if this quick check cannot tell (the caller then checks the general way).
    A float where the region lifted scalar n is appended to ``lifted`` as (n, its repr)
    (the generated flat check appends the float itself): the call matches only if
    ``lift.accept`` (``replay._accept``) takes those values too."""
    if lifted is None:
        lifted = []
    check = g.check
    if check is None:
        return _match_walk(g, args, kwargs, tensors, lifted)
    return check(args, kwargs, tensors, lifted)


def _fill(g: OpGuard, args: tuple, kwargs: dict) -> tuple:
    """``g``'s template with the call's own values where the recorded ones cannot be."""
    atemp, ktemp = g.template  # type: ignore[misc]
    atemp, ktemp = list(atemp), dict(ktemp)
    nargs = g.nargs
    for p in g.floats:
        if p < nargs:
            atemp[p] = args[p]
        else:
            name = g.kwnames[p - nargs]
            ktemp[name] = kwargs[name]
    return (tuple(atemp), ktemp)


def _generate(g: OpGuard) -> Any:
    """``g``'s flat check as one Python function, generated once per guard.

    Why generated: the check runs for every op of every replay, and a loop that reads
    each argument's expectation from a tuple and branches on its kind costs more than
    the comparisons themselves. The function makes the same comparisons, in the same
    order, with the expected values bound as constants: per tensor its exact type,
    dtype, offset, strides and sizes; per scalar its type and value; grad mode and
    autocast state; arity and keyword names. It returns the template, or None.

    The expected values are the closure of a factory made once per text (``_factory``):
    guards of one overload and arity mostly read the same, and one code object run with
    a namespace per guard kept the interpreter from keeping its global lookups."""
    nargs = g.nargs
    bound: dict[str, Any] = {"g": g, "T": g.template, "KW": g.kwnames}
    code = [f"    if len(args) != {nargs}: return None",
            "    if tuple(kwargs) != KW: return None" if g.kwnames else
            "    if kwargs: return None",
            f"    if _grad() is not {g.grad} or _autocast() is not {g.autocast}: return None"]
    for p, e in enumerate(g.flat):  # type: ignore[arg-type]
        c = f"c{p}"
        code.append(f"    a = args[{p}]" if p < nargs else f"    a = kwargs[{g.kwnames[p - nargs]!r}]")
        kind = e[0]
        if kind == _TENSOR:
            bound[c + "s"], bound[c + "t"], bound[c + "d"] = e[1], e[2], e[4]
            code += [f"    if (type(a) is not NT or a.dtype is not {c}d or a.storage_offset() != "
                     f"{int(e[3])} or a.stride() != {c}t or a.shape != {c}s): return None",
                     "    tensors.append(a)"]
        elif kind == _EXACT:
            bound[c + "y"], bound[c] = e[1], e[2]
            code.append(f"    if type(a) is not {c}y or a != {c}: return None")
        elif kind == _NONE:
            code.append("    if a is not None: return None")
        elif kind == _FLOAT:  # as in ``_leaf``
            if e[2] is None:
                bound[c] = e[1]
                code.append(f"    if type(a) is not float or repr(a) != {c}: return None")
            else:
                bound[c] = e[2]
                code.append(f"    if type(a) is not float or a != {c}: return None")
        elif kind == _LIFTED:  # what ``lift.guard`` takes: a float, whatever its value
            # the float itself, not its repr (``replay._accept`` reads it as
            # ``float(repr(a))`` would: formatting and parsing it cost ~1.5 us)
            code += ["    if type(a) is not float: return None",
                     f"    lifted.append(({int(e[1])}, a))"]
        elif kind == _GENERAL:  # a dtype, layout, memory format or device
            bound[c] = e
            code.append(f"    if _arg({c}, a, tensors, lifted) is _FAIL: return None")
        else:  # _SEQ of tensors, exact scalars and Nones (each as ``_leaf`` checks it)
            bound[c + "y"] = e[1]
            code.append(f"    if type(a) is not {c}y or len(a) != {len(e[2])}: return None")
            for j, x in enumerate(e[2]):
                cj = f"{c}_{j}"
                if x[0] == _TENSOR:
                    bound[cj + "s"], bound[cj + "t"], bound[cj + "d"] = x[1], x[2], x[4]
                    code += [f"    b = a[{j}]",
                             f"    if (type(b) is not NT or b.dtype is not {cj}d or b.storage_offset() "
                             f"!= {int(x[3])} or b.stride() != {cj}t or b.shape != {cj}s): return None",
                             "    tensors.append(b)"]
                elif x[0] == _EXACT:
                    bound[cj + "y"], bound[cj] = x[1], x[2]
                    code += [f"    b = a[{j}]",
                             f"    if type(b) is not {cj}y or b != {cj}: return None"]
                else:  # _NONE
                    code.append(f"    if a[{j}] is not None: return None")
    code.append("    return _fill(g, args, kwargs)" if g.floats else "    return T")
    text = "\n".join([f"def make({', '.join(bound)}):",
                      "  def check(args, kwargs, tensors, lifted):",
                      *("  " + line for line in code), "  return check"])
    return _factory(text, f"<guard of {g.func}>")(*bound.values())


# what every generated check reads besides its closure: one namespace per factory
_GLOBALS = {"NT": NeuronTensor, "_grad": _grad_enabled, "_autocast": _autocast_enabled,
            "_arg": _arg, "_leaf": _leaf, "_FAIL": _FAIL, "_fill": _fill}
_FACTORIES: dict[tuple[str, str], Any] = {}  # (text, name) -> its factory
_FACTORIES_KEPT = 4096  # (all forgotten at once past this)


def _factory(text: str, name: str) -> Any:
    """The factory ``make`` defined by ``text``, compiled once per distinct text and
    name: most guards of an overload read the same (their expected values are the
    factory's arguments), and compiling costs far more than the check it makes, a
    cost paid during the first steps a guard is used in (the recorder's trail, a
    replay)."""
    key = (text, name)
    make = _FACTORIES.get(key)
    if make is None:
        if len(_FACTORIES) >= _FACTORIES_KEPT:
            _FACTORIES.clear()
        ns = dict(_GLOBALS)
        exec(compile(text, name, "exec"), ns)  # noqa: S102
        make = _FACTORIES[key] = ns["make"]
    return make


def _match_walk(g: OpGuard, args: tuple, kwargs: dict, tensors: list[torch.Tensor],
                lifted: list[tuple[int, str]]) -> Any:
    """``match`` for a guard without a flat check: each argument walked by ``_arg``."""
    expected = g.args
    if expected is None or len(args) != len(expected) or len(kwargs) != len(g.kwargs):  # type: ignore[arg-type]
        return None
    if torch.is_grad_enabled() is not g.grad or torch.is_autocast_enabled() is not g.autocast:
        return None
    atemp = []
    for e, a in zip(expected, args, strict=True):
        t = _arg(e, a, tensors, lifted)
        if t is _FAIL:
            return None
        atemp.append(t)
    ktemp = {}
    if kwargs:
        for (name, e), (k, a) in zip(g.kwargs, kwargs.items(), strict=True):  # type: ignore[arg-type]
            if k != name:
                return None
            t = _arg(e, a, tensors, lifted)
            if t is _FAIL:
                return None
            ktemp[k] = t
    return (tuple(atemp), ktemp)
