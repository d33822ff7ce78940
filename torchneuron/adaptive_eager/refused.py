"""Ops the compiler refuses whatever region holds them: learned once, then run eagerly
between regions.

A region holding an op with no lowering (GradScaler's ``_amp_update_scale_``) or one
the compiler cannot replay exactly (``multinomial`` drawing from probabilities the graph
computed) fails to compile, and so does every region that holds it again: the whole
step stays eager. The first such failure names the op (``CompileError.op`` with an
op-intrinsic ``reason``); from then on the runtime ends the segment before that op and
runs it eagerly, unrecorded, like a growing op (``growing``), so the ops on either side
of it form regions of their own that do compile. Eager runs the op itself, so the
numbers are eager's; only fusion across it is lost.

Some are known before any region fails. Ops whose output's shape depends on their
inputs' values (``nonzero``, ``masked_select``, ``unique``, ``bincount``; indexing with a
boolean mask, and its backward's ``index_put`` of one value per selected element) cannot
be in a static-shape program, and worse, a segment holding one
never repeats: its shapes change with the data, so no region around it ever got hot (an
evaluation loop computing metrics with ``unique`` and ``masked_select`` replayed nothing
in 25 steps). They end the segment from the start, as a real device ends its graph there
to learn the size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from torchneuron.compiler.decomp.index import mask_row_values
from torchneuron.compiler.decomp.refusals.cpu_dependent import (
    ALWAYS_REFUSED,
)
from torchneuron.compiler.decomp.refusals.cpu_dependent import (
    REFUSED_REASONS as CPU_DEPENDENT_REASONS,
)

__all__ = ["DYNAMIC_SHAPE_ALWAYS", "DYNAMIC_SHAPE_WHEN", "RefusedOps", "stream_names"]

aten = torch.ops.aten


def _bool_index(args: tuple, kwargs: dict) -> bool:
    """``x[mask]``: an index of booleans (or bytes) selects as many rows as are true."""
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
               for i in (args[1] if len(args) > 1 else kwargs.get("indices", ())))


def _mask_rows(args: tuple, kwargs: dict) -> bool:
    """``x[mask] = v`` with one value per selected element (the backward of ``x[mask]``):
    where each lands depends on the mask's values (one row for all is a ``where``)."""
    indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
    values = args[2] if len(args) > 2 else kwargs.get("values")
    return _bool_index(args, kwargs) and isinstance(values, torch.Tensor) \
        and not mask_row_values(args[0], indices, values)


def _complex_call(args: tuple, kwargs: dict) -> bool:
    """A call with a complex tensor, or asked for a complex dtype or number
    (``zeros(dtype=cfloat)``, ``full(shape, 1j)``)."""
    for a in (*args, *kwargs.values()):
        for v in (a if isinstance(a, (list, tuple)) else (a,)):
            if ((isinstance(v, torch.Tensor) and v.is_complex())
                    or (isinstance(v, torch.dtype) and v.is_complex) or isinstance(v, complex)):
                return True
    return False


def _either(first: Callable[[tuple, dict], bool], second: Callable[[tuple, dict], bool]
            ) -> Callable[[tuple, dict], bool]:
    """A per-call rule refusing the calls either rule refuses."""
    return lambda args, kwargs: first(args, kwargs) or second(args, kwargs)


def _no_output_size(args: tuple, kwargs: dict) -> bool:
    """``repeat_interleave(repeats)`` sums ``repeats`` for its length unless told it."""
    return kwargs.get("output_size", args[1] if len(args) > 1 else None) is None


# tagged ``dynamic_output_shape`` in every call (each overload; ``.out`` resizes ``out``)
DYNAMIC_SHAPE_ALWAYS = tuple(
    getattr(packet, name) for packet in (aten.nonzero, aten.masked_select, aten._unique,
                                         aten._unique2, aten.unique_dim,
                                         aten.unique_consecutive, aten.bincount)
    for name in packet.overloads())
# tagged too, but dynamic only for some arguments: decided per call
DYNAMIC_SHAPE_WHEN: dict[Any, tuple[Callable[[tuple, dict], bool], str]] = {
    aten.index.Tensor: (_bool_index, "dynamic-output-shape: a boolean index"),
    aten.repeat_interleave.Tensor: (_no_output_size, "dynamic-output-shape: no output_size"),
    **{f: (_mask_rows, "data-dependent: a boolean index with a value per element")
       for f in (aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default)},
}

# Reasons that belong to the op, not to the region, its layouts or the worker (half-conv
# and cpu-dependent-special-value are the op's in a dtype: all its overloads run eagerly)
_OP_REASONS = frozenset({
    "no-lowering", "random-op-with-tensor-values", "random-op-multi-output",
    "random-op-unsupported-arg", "dynamic-output-shape", "data-dependent",
    "tie-order", "clamp-tensor-signed-zero", "half-conv", "cpu-dependent-special-value",
    "custom-op", "embedding-renorm-float16", "adaptive-avg-half-window", "cpu-dependent-premise",
    "storage-layout",  # capture's own refusal (as_strided of DDP's buckets, set_, resize_)
    "complex-values",  # capture's too (``_learn_complex``)
    "upsample-antialias", "conv-channels-last-grad",
    *CPU_DEPENDENT_REASONS,
})
_MAX_OPS = 16  # op names: a compiler refusing everything cannot shatter the stream
_MAX_COMPLEX = 32  # op names learned for complex values, apart
# The op a refusal names may be what the compiler's preparation made of the stream's op
# (PyTorch's decompositions run first): these stream ops become the named one, so they
# are what runs between regions. Without this, a bfloat16 BatchNorm refused as
# ``_native_batch_norm_legit`` was never matched to the stream's ``native_batch_norm``,
# and every region holding it failed to compile again, for good.
_BECOMES = {
    "aten._native_batch_norm_legit": ("aten.native_batch_norm",
                                      "aten._native_batch_norm_legit_functional",
                                      "aten._native_batch_norm_legit_no_training"),
}


def stream_names(name: str) -> tuple[str, ...]:
    """The stream's ops a refusal naming ``name`` (``aten.x``) is learned for."""
    return (name, *_BECOMES.get(name, ()))


def _name(func: Any) -> str:
    """``aten.x`` for overloads of ``x`` and ``x_`` alike: the compiler names the
    functional op (``_amp_update_scale``) where the stream has the in-place one."""
    return "aten." + str(getattr(func, "_opname", "")).rstrip("_")


class RefusedOps:
    """Aten overloads to run between regions, each with the compiler's reason."""

    def __init__(self) -> None:
        self.ops: dict[Any, str] = {}  # overload -> "aten.x.overload (reason)"
        self.ids: set[int] = set()  # ``id`` of each: the op path's test, no Python hash
        self.names: set[str] = set()
        self.complex_names: set[str] = set()  # learned for complex values (``_learn_complex``)
        # refused in every call (oneDNN's LSTM layer): known before any region fails, so
        # the first regions already end around them (an LSTM's training step replayed
        # whole only after two regions had failed to compile, a dozen steps in); shown
        # (``describe``) once met
        known = {**ALWAYS_REFUSED, **dict.fromkeys(DYNAMIC_SHAPE_ALWAYS, "dynamic-output-shape"),
                 **{f: why for f, (_, why) in DYNAMIC_SHAPE_WHEN.items()}}
        self.unmet: set[Any] = set(known)
        for f, reason in known.items():
            self.ops[f] = f"{f} ({reason})"
            self.ids.add(id(f))
        self.when = {id(f): rule for f, (rule, _) in DYNAMIC_SHAPE_WHEN.items()}

    def refuses(self, func: Any, args: tuple, kwargs: dict) -> bool:
        """Whether this call of ``func`` (one of ``ids``) runs between regions: always,
        but for the ops refused only for some arguments (``DYNAMIC_SHAPE_WHEN``)."""
        rule = self.when.get(id(func))
        return rule is None or rule(args, kwargs)

    def met(self, func: Any) -> None:
        """``func`` ran between regions (a known refusal is then shown)."""
        self.unmet.discard(func)

    def learn(self, err: BaseException, region_ops: Iterable[Any]) -> bool:
        """Learn the overloads of the op a compile error blames that the failed region
        holds (not their siblings: ``bernoulli.p`` compiles where ``bernoulli.default``
        of computed probabilities does not), if the refusal is the op's own."""
        op, reason = getattr(err, "op", None), getattr(err, "reason", None)
        if reason == "complex-values":
            return self._learn_complex(getattr(err, "ops", {}), region_ops)
        if not op or reason not in _OP_REASONS:
            return False
        parts = str(op).replace("::", ".").split(".")
        if reason == "custom-op" and len(parts) >= 2:  # a user's custom op (an nki_op)
            name = ".".join(parts[:2])
            funcs = [f for f in dict.fromkeys(region_ops)
                     if isinstance(f, torch._ops.OpOverload) and f.name() == str(op)
                     and (f not in self.ops or id(f) in self.when)]
            return self._add(funcs, name, reason)
        if len(parts) < 2 or parts[0] != "aten":
            return False
        name = "aten." + parts[1].rstrip("_")
        if name not in self.names and len(self.names) >= _MAX_OPS:
            return False
        names = set(stream_names(name))
        funcs = [f for f in dict.fromkeys(region_ops)
                 if isinstance(f, torch._ops.OpOverload) and _name(f) in names
                 and (f not in self.ops or id(f) in self.when)]
        return self._add(funcs, name, reason)

    def _learn_complex(self, ops: dict[str, bool], region_ops: Iterable[Any]) -> bool:
        """Every overload a region refused for complex values named: those reading them
        (or asked for a complex dtype) run between regions in their calls with a complex
        value (``_complex_call``: a real ``mul`` stays in its region), those making them
        from real ones in every call. An op refused already for some calls (``x[mask]``)
        is refused in its complex calls too; counted apart from the compiler's refusals
        (``_MAX_COMPLEX``): a rotary embedding alone names seven ops."""
        learned = False
        funcs = [f for f in dict.fromkeys(region_ops) if isinstance(f, torch._ops.OpOverload)]
        for name, per_call in ops.items():
            these = [f for f in funcs if f.name() == name]
            if not these or (_name(these[0]) not in self.complex_names
                             and len(self.complex_names) >= _MAX_COMPLEX):
                continue
            for f in these:
                if id(f) in self.ids and id(f) not in self.when:
                    continue  # refused in every call already
                rule = self.when.get(id(f))  # (a rule of some calls: ``x[mask]``'s)
                self.ops.setdefault(f, f"{f} (complex-values)")
                self.ids.add(id(f))
                if not per_call:
                    self.when.pop(id(f), None)
                else:
                    self.when[id(f)] = _complex_call if rule is None else _either(rule, _complex_call)
                learned = True
            self.complex_names.add(_name(these[0]))
        return learned

    def _add(self, funcs: list[Any], name: str, reason: str) -> bool:
        if name not in self.names and len(self.names) >= _MAX_OPS:
            return False
        for f in funcs:  # (refused in every call now, if only in some before)
            self.ops[f] = f"{f} ({reason})"
            self.ids.add(id(f))
            self.when.pop(id(f), None)
        if funcs:
            self.names.add(name)
        return bool(funcs)

    def describe(self) -> dict[str, str]:
        """Each refused overload -> the compiler's reason."""
        return {text.split(" (")[0]: text.split(" (", 1)[1][:-1]
                for f, text in self.ops.items() if f not in self.unmet}
