"""Custom ops carried into the executable as ``stablehlo.custom_call``s.

A custom op (``torch.library.custom_op``) whose process registered a custom-call target
for it (``stablehlo.custom_targets``: an ``nki_op`` does, when it is defined) stays one
opaque node through tracing and is carried to the end of the lowering path instead of
refusing the whole graph:

1. ``carry_custom_calls`` (prepare, in the calling process, where the op's code lives)
   replaces the node by a *carrier*, ``torchneuron::custom_call_<n>(Tensor[] inputs, str
   target, str config) -> n Tensors``: an op every process defines (the compile worker
   imports this module), so the graph pickles to the worker. ``config`` is JSON: the
   op's non-tensor arguments with a ``{"tensor": i}`` slot per tensor, its outputs'
   shapes and dtypes (the carrier's fake implementation reads them), and the target's
   cost ``plan`` for these shapes on this profile (the kernel run once on zeros);
2. the Torch-MLIR import turns the carrier into a ``stablehlo.custom_call @target`` with
   the config as its ``backend_config`` (``lower/custom_calls.py``);
3. neuronc makes it a kernel of its own costed by its plan (``neuronc/custom_calls``);
4. the interpreter runs the registered target on the call's operands.

A call of an op that writes its inputs (``mutates_args``) reaches this pass as
functionalization wrote it, ``auto_functionalized_v2(op, ...)``: it is carried the same
way, its operands led by the bases it writes (``config["mutated"]``) and its outputs
ending with their new values (``mutating_calls.py``).

The executable stays data: it names the target and holds JSON. A node that cannot be
carried (an output that is not a tensor, an argument JSON cannot hold, no tensor input)
is refused as before (``custom-op``), saying why.
"""

from __future__ import annotations

import json
import operator
from typing import Any

import torch
import torch.fx as fx

from torchneuron.compiler.errors import PrepareError
from torchneuron.compiler.prepare.kernel_layouts import kernel_output_strides, refresh_values
from torchneuron.compiler.prepare.mutating_calls import (
    BaseSlot,
    functionalized_call,
    mutable_op_of,
)
from torchneuron.compiler.stablehlo.custom_targets import (
    call_target,
    fill_arguments,
    lookup_target,
    target_for_op,
)
from torchneuron.compiler.stablehlo.operand_layout import layout_of

__all__ = ["MAX_OUTPUTS", "carrier", "is_carrier", "carry_custom_calls"]

MAX_OUTPUTS = 8
_LIB = torch.library.Library("torchneuron", "FRAGMENT")
_CARRIERS: dict[Any, int] = {}


def _define_carriers() -> None:
    """``torchneuron::custom_call_1`` .. ``_8``: one op per output count (Torch-MLIR's
    importer types each result from the node's value, so the arity is in the schema)."""
    for n in range(1, MAX_OUTPUTS + 1):
        name = f"custom_call_{n}"
        outs = "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"
        _LIB.define(f"{name}(Tensor[] inputs, str target, str config) -> {outs}")
        _LIB.impl(name, _run_carrier, "CPU")
        torch.library.register_fake(f"torchneuron::{name}", _fake_carrier, lib=_LIB)
        _CARRIERS[getattr(torch.ops.torchneuron, name).default] = n


def _fake_carrier(inputs: list[torch.Tensor], target: str, config: str) -> Any:
    """Outputs of the declared shapes and dtypes, in the op's own layout where it is not
    contiguous (``config["strides"]``): the views the graph takes of them stay views."""
    device = inputs[0].device
    cfg = json.loads(config)
    strides = cfg.get("strides", {})
    outs = tuple(torch.empty_strided(shape, strides[str(i)], dtype=getattr(torch, dtype),
                                     device=device) if str(i) in strides else
                 torch.empty(shape, dtype=getattr(torch, dtype), device=device)
                 for i, (shape, dtype) in enumerate(cfg["outputs"]))
    return outs[0] if len(outs) == 1 else outs


def _run_carrier(inputs: list[torch.Tensor], target: str, config: str) -> Any:
    """On CPU tensors (a prepared graph run as a reference): the registered target."""
    found = lookup_target(target)
    if found is None:
        raise RuntimeError(f"custom call target {target!r} is not registered in this process")
    outs, _, _ = call_target(found, json.loads(config), list(inputs))
    outs = tuple(o.clone() for o in outs)
    return outs[0] if len(outs) == 1 else outs


_define_carriers()


def carrier(n_outputs: int) -> Any:
    """The carrier op (an OpOverload) for ``n_outputs`` outputs (one: a Tensor, not a
    tuple, as Torch-MLIR's importer reads a single result)."""
    return getattr(torch.ops.torchneuron, f"custom_call_{n_outputs}").default


def is_carrier(target: Any) -> bool:
    """Whether ``target`` (an FX node's target) is one of the carrier ops."""
    return target in _CARRIERS


# --- the prepare pass ---------------------------------------------------------------------------
class _NotCarried(Exception):
    """Why a node with a registered target cannot be carried."""


def carry_custom_calls(gm: fx.GraphModule) -> int:
    """Replace every custom-op node with a registered target by its carrier; returns how
    many were carried. Raises ``PrepareError(reason="custom-op")`` naming the op and why
    for a registered one that cannot be carried."""
    carried = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        op = node.target if isinstance(node.target, torch._ops.OpOverload) else mutable_op_of(node)
        target = target_for_op(op) if op is not None else None
        if target is None or not _wanted(target, node):
            continue
        try:
            if _carry(gm, node, target):  # eager's kernel lays its outputs out otherwise
                refresh_values(gm)  # (than its fake: the values after it follow)
        except _NotCarried as e:
            qualname = op.name()
            raise PrepareError(
                f"{qualname} cannot be carried into the executable as a custom call: {e}. "
                "This graph runs eagerly on the device, where the op runs its own "
                "implementation.", op=qualname, reason="custom-op") from None
        carried += 1
    if carried:
        gm.graph.lint()
        gm.recompile()
    return carried


def _carry(gm: fx.GraphModule, node: fx.Node, target: Any) -> bool:
    """Replace ``node`` by its carrier; True when eager's kernel gives an output another
    layout than the node's value (``kernel_layouts``: the carrier declares the kernel's)."""
    try:
        functionalized = functionalized_call(node)  # a mutating op (mutating_calls.py)
    except ValueError as e:
        raise _NotCarried(str(e)) from None
    if functionalized is None:
        val = node.meta.get("val")
        single = isinstance(val, torch.Tensor)
        vals = [val] if single else list(val) if isinstance(val, (tuple, list)) else None
        node_args, node_kwargs, bases, skip = node.args, node.kwargs, [], 0
    else:  # outputs: the op's, then the new values of the bases it writes
        single, vals = False, functionalized.outputs
        node_args, node_kwargs = (), functionalized.kwargs
        bases, skip = functionalized.bases, functionalized.skip
    if not vals or not all(isinstance(o, torch.Tensor) or o is None for o in vals):
        raise _NotCarried("its outputs are not one tensor or a tuple of tensors")
    # a backward's masked outputs are None: the carrier returns the others (its target
    # drops the Nones), and each getitem is renumbered to its output among them
    kept = [i for i, o in enumerate(vals) if o is not None]
    relaid = False
    if functionalized is None and target.costed is not None and target.op is not None:
        real = kernel_output_strides(target.op, _value(node.args), _value(node.kwargs))
        if real is not None and len(real) == len(vals):
            vals, relaid = _relaid(vals, real)
    outs = [vals[i] for i in kept]
    place = {skip + i: n for n, i in enumerate(kept)}  # the node's output -> the carrier's
    if not outs:
        raise _NotCarried("it returns no tensor")
    if len(outs) > MAX_OUTPUTS:
        raise _NotCarried(f"it has {len(outs)} outputs (at most {MAX_OUTPUTS})")
    inputs: list[fx.Node] = list(bases)  # (operands 0..: the bases a mutating call copies)
    dtypes = target.costed is not None  # eager's kernels read {"dtype": name}; kernels do not
    args = [_template(a, inputs, dtypes) for a in node_args]
    kwargs = {k: _template(v, inputs, dtypes) for k, v in node_kwargs.items()}
    if not inputs:
        raise _NotCarried("it has no tensor input")
    config = {"args": args, "kwargs": kwargs,
              "outputs": [[list(o.shape), str(o.dtype).removeprefix("torch.")] for o in outs]}
    strided = {str(i): list(o.stride()) for i, o in enumerate(outs) if not o.is_contiguous()}
    if strided:  # (CPU's flash attention: its output in (batch, seq, heads, dim) memory)
        config["strides"] = strided
    if bases:
        config["mutated"] = list(range(len(bases)))
    if target.plan is not None:
        config["plan"] = _plan(target, config, [i.meta["val"] for i in inputs])
    if target.costed is not None:
        config["costed"] = target.costed
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    with gm.graph.inserting_before(node):
        call = gm.graph.call_function(carrier(len(outs)), (inputs, target.name, text))
        call.meta["val"] = outs[0] if len(outs) == 1 else tuple(outs)
        items = [call] if len(outs) == 1 else []
        for i, o in enumerate(outs if len(outs) > 1 else []):
            item = gm.graph.call_function(operator.getitem, (call, i))
            item.meta["val"] = o
            items.append(item)
    if single:
        node.replace_all_uses_with(items[0])
    else:
        for user in list(node.users):
            if user.op == "call_function" and user.target is operator.getitem:
                if user.args[1] in place:
                    user.replace_all_uses_with(items[place[user.args[1]]])
                elif user.users:  # (the None of an op that returns nothing)
                    raise _NotCarried("the None it returns is used")
                gm.graph.erase_node(user)
            else:
                raise _NotCarried("its tuple of outputs is used as a whole")
    gm.graph.erase_node(node)
    return relaid


def _relaid(vals: list[Any], real: list[Any]) -> tuple[list[Any], bool]:
    """``vals`` with each tensor in the strides eager's kernel gave it (``real``)."""
    out, changed = list(vals), False
    for i, (v, s) in enumerate(zip(vals, real, strict=True)):
        mode = getattr(v, "fake_mode", None)
        if mode is not None and s is not None and tuple(v.stride()) != s:
            with mode:
                out[i] = torch.empty_strided(v.shape, s, dtype=v.dtype, device=v.device)
            changed = True
    return out, changed


def _wanted(target: Any, node: fx.Node) -> bool:
    """Whether this call is carried (a target may carry only some calls of its op)."""
    if target.carry_if is None:
        return True
    return bool(target.carry_if(tuple(_value(a) for a in node.args),
                                {k: _value(v) for k, v in node.kwargs.items()}))


def _value(a: Any) -> Any:
    """A node argument with its nodes replaced by their (fake) values."""
    if isinstance(a, fx.Node):
        return a.meta.get("val")
    if isinstance(a, (list, tuple)):
        return type(a)(_value(x) for x in a)
    return a


def _template(a: Any, inputs: list[fx.Node], dtypes: bool = False) -> Any:
    """A node argument as JSON: tensors become ``{"tensor": i}`` slots (in ``inputs``);
    for eager's kernel (``dtypes``) with ``strides``, the ones the operand has in eager
    where they are not contiguous (``stablehlo.operand_layout``: eager's kernels follow
    them; ``native_batch_norm_backward`` given ``out.sum()``'s expanded ones sums in
    another order than given the same ones materialized, 96 of 96 off)."""
    if isinstance(a, BaseSlot):  # a mutated argument: its base (operand ``index``)
        return ({"tensor": a.index} if a.slice is None
                else {"tensor": a.index, "slice": list(a.slice)})
    if isinstance(a, fx.Node):
        if not isinstance(a.meta.get("val"), torch.Tensor):
            raise _NotCarried(f"argument {a.name} is not a tensor")
        inputs.append(a)
        strides = layout_of(a.meta["val"]) if dtypes else None
        if strides is not None:  # eager's kernel: handed the operand in these strides
            return {"tensor": len(inputs) - 1, "strides": strides}
        return {"tensor": len(inputs) - 1}
    if isinstance(a, (list, tuple)):
        return [_template(x, inputs, dtypes) for x in a]
    if a is None or isinstance(a, (bool, int, str)):
        return a
    if isinstance(a, torch.dtype) and dtypes:
        return {"dtype": str(a).removeprefix("torch.")}
    if isinstance(a, float):
        if a != a or a in (float("inf"), float("-inf")):
            raise _NotCarried(f"a float argument is {a} (JSON holds finite floats only)")
        return a
    raise _NotCarried(f"an argument of type {type(a).__name__} cannot be written as JSON")


_PLANS: dict[str, dict[str, Any]] = {}


def _plan(target: Any, config: dict[str, Any], values: list[torch.Tensor]) -> dict[str, Any]:
    """The target's cost plan for these shapes on the current profile (memoized: a model
    calls one kernel on the same shapes in every layer)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from torchneuron.hardware import current_profile

    specs = [[list(v.shape), str(v.dtype)] for v in values]
    key = json.dumps([target.name, current_profile().name, specs, config["args"],
                      config["kwargs"]], sort_keys=True)
    plan = _PLANS.get(key)
    if plan is None:
        with unset_fake_temporarily():
            zeros = [torch.zeros(v.shape, dtype=v.dtype) for v in values]
            args, kwargs = fill_arguments(config, zeros)
            try:
                plan = dict(target.plan(args, kwargs))
            except Exception as e:  # noqa: BLE001 - the kernel cannot run on these shapes
                raise _NotCarried(f"planning its cost failed ({type(e).__name__}: {e})") from None
        plan["profile"] = current_profile().name
        _PLANS[key] = plan
    return plan
