"""lower: a prepared FX graph -> StableHLO text, via Torch-MLIR.

The text is the cache key's main ingredient and what users inspect, so it is printed in
full: `get_asm(large_elements_limit=None)` keeps every constant (tensor constants are
printed as `dense_resource<...>` handles with hex blobs in the trailing
`dialect_resources` section). Torch-MLIR failures are turned into `LoweringError` naming
the torch op that failed to legalize, so failures can be counted per op.

Torch-MLIR can crash the process on some graphs: call this through
`worker.lower_in_worker` unless you are debugging.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

from torchneuron.compiler.errors import LoweringError

__all__ = ["lower_to_stablehlo", "parse_failed_op"]

_LEGALIZE = re.compile(r"failed to legalize operation '([\w.]+)'")
_OPERATOR = re.compile(r'name = "([\w.]+)"')
_TORCH_OP = re.compile(r"torch\.(aten|prims|operator|constant|prim)\.([\w.]+)")


def parse_failed_op(message: str) -> tuple[str | None, str]:
    """(op, reason) from a Torch-MLIR error message.

    ``torch.aten.hypot`` -> ("aten.hypot", "no-lowering"); a dangling
    ``torch.constant.int`` -> ("torch.constant.int", "dangling-scalar").
    """
    m = _LEGALIZE.search(message)
    if m:
        op = m.group(1)
        named = _OPERATOR.search(message)
        if op == "torch.operator" and named:
            op = named.group(1)
        if op.startswith(("torch.constant.", "torch.prim.")):
            return op, "dangling-scalar"
        if op.startswith("torch."):
            op = op.removeprefix("torch.")
            return op, "no-lowering"
        return op, "illegal-op"
    m = _TORCH_OP.search(message)
    if "unsupported" in message.lower() or "not supported" in message.lower():
        return (m.group(0).removeprefix("torch.") if m else None), "unsupported"
    if m:
        return m.group(0).removeprefix("torch."), "lowering-failed"
    return None, "lowering-failed"


def lower_to_stablehlo(gm: fx.GraphModule, example_inputs: Sequence[Any] | None = None,
                       *, func_name: str = "main") -> str:
    """Import ``gm`` (a prepared, functional core-aten graph whose nodes carry
    ``meta["val"]``) with `torch_mlir.fx.stateless_fx_import` and return StableHLO text.

    ``example_inputs`` is only used to fill in missing placeholder metadata (graphs built
    by hand); prepared graphs already have it.
    """
    import torch_mlir.fx as tmfx
    from torch_mlir.extras.fx_importer import FxImporter

    from torchneuron.compiler.lower.literal_tracker import LiveRefTracker

    _ensure_meta(gm, example_inputs)
    # No dialect is loaded up front (loading all of them took ~40 ms per lowering, about
    # a third of a small graph's lowering); the passes load the ones they need.
    context = tmfx.ir.Context(load_on_create_dialects=[])
    tmfx.torch_d.register_dialect(context)
    diagnostics: list[str] = []

    def on_diagnostic(d: Any) -> bool:  # MLIR prints these to fd 2 otherwise
        diagnostics.append(str(d))
        return True

    handle = context.attach_diagnostic_handler(on_diagnostic)
    importer = FxImporter(context=context, py_attr_tracker=LiveRefTracker())
    try:
        module = _import_and_lower(tmfx, importer, gm, func_name)
    except Exception as e:  # torch_mlir raises plain Exception / RuntimeError
        text = "\n".join(diagnostics) + "\n" + str(e)
        op, reason = parse_failed_op(text)
        if reason in ("dangling-scalar", "lowering-failed"):
            # The first diagnostic often names a scalar constant whose consumer did not
            # convert; the partially converted module still holds that consumer.
            left = _leftover_torch_op(importer, _graph_ops(gm))
            if left is not None:
                op, reason = left, "no-lowering"
            elif reason == "dangling-scalar":
                op = None  # a scalar constant is no op of the program to blame
        first = (diagnostics[0] if diagnostics else text.strip().splitlines()[0]).strip()
        raise LoweringError(
            f"Torch-MLIR could not lower the graph to StableHLO: {first[:300]}. Expected "
            f"every op to have a lowering; {op or 'an op of the graph'} has none in this "
            "version of torchneuron, so the graph runs eagerly, with eager's results "
            "(nothing to change in your program). To report it, include this message and "
            "torchneuron.compiler.explain()'s output.",
            op=op, reason=reason, detail=text[-4000:]) from None
    finally:
        handle.detach()
    return module.operation.get_asm(large_elements_limit=None)


def _import_and_lower(tmfx: Any, importer: Any, gm: fx.GraphModule, func_name: str) -> Any:
    """``stateless_fx_import(..., output_type="stablehlo")`` without the second MLIR
    context it creates and never uses (another ~40 ms per lowering)."""
    lowering = getattr(tmfx, "_module_lowering", None)
    if lowering is None:  # a torch-mlir without the helper: the public call
        return tmfx.stateless_fx_import(gm, output_type="stablehlo", model_name=func_name,
                                        fx_importer=importer)
    importer.import_stateless_graph(gm.graph, func_name=func_name)
    from torchneuron.compiler.lower.custom_calls import holds_carriers, lower_carriers

    if holds_carriers(gm):  # custom ops carried as stablehlo.custom_call (custom_call.py)
        lower_carriers(importer.module)
    return lowering(False, False, tmfx.OutputType.STABLEHLO, importer.module,
                    fx_import_options=tmfx.FxImportOptions(),
                    backend_options=tmfx.BackendLoweringOptions(allow_non_finites=True))


_LEFTOVER = re.compile(r"= torch\.(aten\.\w+|prims\.\w+)|name = \"torch\.(aten\.\w+)\"")


def _graph_ops(gm: fx.GraphModule) -> set[str]:
    """The graph's op packets as Torch-MLIR names them (``aten.mm``)."""
    names = set()
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is not None:
            names.add(schema.name.replace("::", "."))
    return names


def _leftover_torch_op(importer: Any, graph_ops: set[str]) -> str | None:
    """The first op of the graph left unconverted in the partially lowered module.

    Only an op of the graph is blamed: Torch-MLIR's own decompositions add ops of their
    own (a boolean-mask ``index_put`` leaves a ``cumprod`` when its size check fails), and
    blaming one of those would teach adaptive eager to refuse an op the program never
    called."""
    try:
        asm = importer.module.operation.get_asm(large_elements_limit=16)
    except Exception:  # noqa: BLE001 - best effort diagnosis only
        return None
    for m in _LEFTOVER.finditer(asm):
        name = m.group(1) or m.group(2)
        if name in graph_ops:
            return name
    return None


def _ensure_meta(gm: fx.GraphModule, example_inputs: Sequence[Any] | None) -> None:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if all("val" in n.meta for n in gm.graph.nodes if n.op != "output"):
        return  # (pickling a GraphModule, e.g. to the worker, drops all node meta)
    if example_inputs is None and not placeholders:
        example_inputs = []
    if example_inputs is None or len(example_inputs) != len(placeholders):
        raise LoweringError("graph placeholders lack meta['val'] and no matching "
                            "example_inputs were given; prepare() the graph first.",
                            reason="missing-meta")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in example_inputs]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
