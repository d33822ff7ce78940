"""Custom ops that write their inputs (``mutates_args``), carried as custom calls.

A custom op declared with ``mutates_args`` (an ``nki_op`` whose kernel accumulates into an
argument) is not functional, and a compiled program holds only functional ops. PyTorch's
answer, which this module follows rather than inventing another: functionalization
replaces the call by the higher-order op ``auto_functionalized_v2(op, **kwargs)``
(``torch/_higher_order_ops/auto_functionalize.py``), whose meaning is "copy the bases of
the mutated arguments, regenerate each mutated argument as its view of the copy, run the
op on them, and return the op's outputs followed by the copies"; the graph then copies
the new values back into the inputs (``copy_``, which prepare turns into write-backs).

Two pieces:

- ``functionalize_mutating_targets``: AOTAutograd's functionalization (the Python mode)
  emits the higher-order op for any mutating custom op, but prepare's trace uses
  ``torch.func.functionalize``, whose C++ kernels refuse a custom op that writes an
  argument. For each such op with a registered custom-call target, a Functionalize
  kernel (Python dispatcher only: AOTAutograd's path does not see it) emits the same
  higher-order op through PyTorch's own helper, so a region adaptive eager recorded, or a
  function given to ``compile_graph``, traces as AOTAutograd's graph does;
- ``functionalized_call``: such a node as what the carrier needs (``custom_calls.py``):
  the op's arguments with each mutated one written as its base (an operand the call may
  not write: ``custom_targets.call_target`` copies it) and, for a slice, the slice; and
  the outputs, the op's tensors then the bases' new values. A mutated argument that is a
  strided view of its base other than a slice is not carried (its offsets are those of
  the trace's layout, which a program's values do not have): the graph is refused as a
  ``custom-op``, saying why, and runs eagerly.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from torchneuron.compiler.stablehlo.custom_targets import registered_targets

__all__ = ["BaseSlot", "FunctionalizedCall", "functionalize_mutating_targets",
           "functionalized_call", "mutable_op_of"]


@dataclass(frozen=True)
class BaseSlot:
    """A mutated argument: base ``index`` of the call, or the slice ``(dim, start, end)``
    of it."""

    index: int
    slice: tuple[int, int, int] | None = None


@dataclass
class FunctionalizedCall:
    """An ``auto_functionalized`` node unpacked: ``kwargs`` are the op's arguments (mutated
    ones as ``BaseSlot``s), ``bases`` the nodes the call copies and returns, ``outputs``
    the fake values of the op's tensor outputs then of the bases' new values, and
    ``skip`` how many leading items of the node's tuple are not outputs (1: the ``None``
    of an op that returns nothing)."""

    op: Any
    kwargs: dict[str, Any]
    bases: list[fx.Node]
    outputs: list[torch.Tensor]
    skip: int


def _hops() -> tuple[Any, Any]:
    from torch._higher_order_ops import auto_functionalize as af

    return af.auto_functionalized, af.auto_functionalized_v2


def mutable_op_of(node: fx.Node) -> Any:
    """The custom op (an OpOverload) an ``auto_functionalized`` node calls, else None."""
    if node.op != "call_function" or node.target not in _hops() or not node.args:
        return None
    op = node.args[0]
    return op if isinstance(op, torch._ops.OpOverload) else None


def functionalized_call(node: fx.Node) -> FunctionalizedCall | None:
    """``node`` unpacked (see ``FunctionalizedCall``), or None if it is no
    ``auto_functionalized`` call; raises ValueError saying why it cannot be carried."""
    from torch._higher_order_ops import auto_functionalize as af

    op = mutable_op_of(node)
    if op is None:
        return None
    names, types = af.get_mutable_args(op)
    kwargs = dict(node.kwargs)
    kwargs.pop("_only_clone_these_bases", None)  # (values are the same either way)
    kwargs.pop("_only_clone_these_tensors", None)
    if node.target is af.auto_functionalized_v2:
        bases = list(kwargs.pop("_all_bases", []))
        views = af.read_view_information_from_args(names, types, kwargs, bases)
        for name in names:
            kwargs[name] = _slots(views[name], name)
    else:  # v1: each mutated argument is its own base
        bases = []
        for name in names:
            if not isinstance(kwargs.get(name), fx.Node):
                raise ValueError(f"its mutated argument {name} is not one tensor")
            bases.append(kwargs[name])
            kwargs[name] = BaseSlot(len(bases) - 1)
    if any(not isinstance(b, fx.Node) for b in bases):
        raise ValueError("a mutated argument is None or not a tensor of the graph")
    val = node.meta.get("val")
    if not isinstance(val, (tuple, list)):
        raise ValueError("its functionalized call has no tuple of values")
    skip = 1 if not op._schema.returns else 0
    outputs = list(val[skip:])
    if not all(isinstance(o, torch.Tensor) for o in outputs):
        raise ValueError("its outputs are not tensors")
    return FunctionalizedCall(op, kwargs, bases, outputs, skip)


def _slots(view: Any, name: str) -> Any:
    from torch._higher_order_ops import auto_functionalize as af

    if view is None:
        return None
    if isinstance(view, list):
        return [_slots(v, name) for v in view]
    if isinstance(view, (af.NotView, af.AliasViewInfo)):
        return BaseSlot(view.base_index)
    if isinstance(view, af.SliceViewInfo):
        return BaseSlot(view.base_index, (int(view.dim), int(view.start), int(view.end)))
    raise ValueError(f"its mutated argument {name} is a strided view of another tensor "
                     "(not a slice of it), whose offsets hold only in the traced layout")


# --- functionalization of mutating custom ops in prepare's trace --------------------------------
_SEEN: set[Any] = set()  # ops of registered targets already looked at


def functionalize_mutating_targets() -> None:
    """Give every mutating op with a registered target its Functionalize kernel (once)."""
    from torch._C import DispatchKey

    for target in registered_targets():
        op = target.op
        if op is None or op in _SEEN:
            continue
        _SEEN.add(op)
        if (isinstance(op, torch._ops.OpOverload) and op._schema.is_mutable
                and DispatchKey.Functionalize not in op.py_kernels):
            op.py_impl(DispatchKey.Functionalize)(_functionalize_kernel(op))


def _functionalize_kernel(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        """``op`` under C++ functionalization: ``auto_functionalized_v2``, as AOTAutograd's
        Python functionalization emits it (``do_auto_functionalize_v2``)."""
        from torch._higher_order_ops import auto_functionalize as af

        schema = op._schema
        normalized = {}
        for i, arg in enumerate(schema.arguments):
            normalized[arg.name] = (kwargs[arg.name] if arg.name in kwargs
                                    else args[i] if i < len(args) else arg.default_value)
        return af._do_auto_functionalize_v2_for_generic_mutable_operator(
            _functionalize_api(), op, schema, normalized)

    return kernel


def _functionalize_api() -> Any:
    """How to unwrap, re-dispatch and wrap here: under ``torch.func.functionalize`` (the
    functorch transform prepare traces with), below its layer and past the Functionalize
    key; under plain C++ functionalization, past the key."""
    from torch._functorch.pyfunctorch import retrieve_current_functorch_interpreter
    from torch._subclasses.functional_tensor import CppFunctionalizeAPI

    interpreter = retrieve_current_functorch_interpreter()
    return CppFunctionalizeAPI() if interpreter is None else _below_layer()(interpreter)


@functools.cache
def _below_layer() -> type:
    from torch._subclasses.functional_tensor import FunctorchFunctionalizeAPI

    class BelowLayer(FunctorchFunctionalizeAPI):
        """functorch's API, re-dispatching past the Functionalize key as well (the op's
        kernel runs at that key, below the transform's layer)."""

        @contextlib.contextmanager
        def redispatch_to_next(self) -> Iterator[None]:
            keys = torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)
            with self.interpreter.lower(), torch._C._ExcludeDispatchKeyGuard(keys):
                yield

    return BelowLayer
