"""The carrier op in Torch-MLIR's torch dialect -> ``stablehlo.custom_call``.

Torch-MLIR imports a carrier (``custom_call.carrier``) as ``torch.operator
"torch.torchneuron.custom_call_<n>"`` on a ``torch.prim.ListConstruct`` of its tensor
inputs and two ``torch.constant.str``s (target, config), and has no lowering for it.
Right after the import, before the pipelines run, each one is replaced by what a
lowering would have produced: its inputs converted to builtin tensors
(``torch_c.to_builtin_tensor``), ``stablehlo.custom_call @target`` with the config as
``backend_config``, and its results converted back (``torch_c.from_builtin_tensor``).
The rest of the graph then lowers as usual around it, and the conversions fold away.

The ``torch_c`` and ``stablehlo`` dialects are loaded by running the StableHLO
conversion pass on an empty function first (the bindings cannot load ``torch_c``
otherwise). Runs in the compile worker, with the rest of the Torch-MLIR import.
"""

from __future__ import annotations

import re
from typing import Any

import torch.fx as fx

from torchneuron.compiler.prepare.custom_calls import is_carrier

__all__ = ["holds_carriers", "lower_carriers"]

_NAME = "torch.torchneuron.custom_call_"
_VTENSOR = re.compile(r"^!torch\.vtensor<\[([^\]]*)\],(\w+)>$")


def holds_carriers(gm: fx.GraphModule) -> bool:
    """Whether the graph calls a carrier (only then is the module rewritten)."""
    return any(n.op == "call_function" and is_carrier(n.target) for n in gm.graph.nodes)


def lower_carriers(module: Any) -> int:
    """Rewrite every carrier of ``module`` (torch dialect, just imported); returns how many."""
    from torch_mlir import ir
    from torch_mlir.passmanager import PassManager

    context = module.context
    with context, ir.Location.unknown():
        empty = ir.Module.parse("module { func.func @f() { return } }")
        PassManager.parse("builtin.module(func.func(convert-torch-to-stablehlo))").run(
            empty.operation)
        done = 0
        for func in module.body.operations:
            for block in func.regions[0].blocks:
                for op in list(block.operations):
                    if op.operation.name == "torch.operator" and _carrier_name(op):
                        _replace(ir, op)
                        done += 1
    return done


def _carrier_name(op: Any) -> bool:
    from torch_mlir import ir

    name = ir.StringAttr(op.attributes["name"]).value
    return name.startswith(_NAME)


def _builtin(ir: Any, torch_type: Any) -> Any:
    """``!torch.vtensor<[4,4],f32>`` -> ``tensor<4x4xf32>`` (signed ints lose the ``s``)."""
    m = _VTENSOR.match(str(torch_type))
    if m is None:
        raise ValueError(f"a custom call operand or result of type {torch_type}: expected a "
                         "tensor of static shape")
    dims, dtype = m.group(1), m.group(2)
    if dtype.startswith("si"):
        dtype = dtype[1:]
    shape = "x".join(d.strip() for d in dims.split(",") if d.strip())
    return ir.Type.parse(f"tensor<{shape}x{dtype}>" if shape else f"tensor<{dtype}>")


def _string(ir: Any, value: Any) -> str:
    owner = value.owner
    if owner.name != "torch.constant.str":
        raise ValueError(f"a custom call's target and config must be constant strings, "
                         f"got {owner.name}")
    return ir.StringAttr(owner.attributes["value"]).value


def _replace(ir: Any, op: Any) -> None:
    listed, target, config = op.operands
    if listed.owner.name != "torch.prim.ListConstruct":
        raise ValueError(f"a custom call's inputs must be a list construct, got "
                         f"{listed.owner.name}")
    at = ir.InsertionPoint(op)
    inputs = [ir.Operation.create("torch_c.to_builtin_tensor", results=[_builtin(ir, v.type)],
                                  operands=[v], ip=at).result
              for v in listed.owner.operands]
    call = ir.Operation.create(
        "stablehlo.custom_call", results=[_builtin(ir, r.type) for r in op.results],
        operands=inputs,
        attributes={"call_target_name": ir.StringAttr.get(_string(ir, target)),
                    "backend_config": ir.StringAttr.get(_string(ir, config))},
        ip=at)
    for old, new in zip(op.results, call.results, strict=True):
        back = ir.Operation.create("torch_c.from_builtin_tensor", results=[old.type],
                                   operands=[new], ip=at)
        old.replace_all_uses_with(back.result)
    op.operation.erase()
