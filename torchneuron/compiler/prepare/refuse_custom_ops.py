"""Custom ops (``torch.library.custom_op``) with no lowering are refused with a typed reason.

A user's custom op stays one opaque node of the traced graph: its fake implementation
gives shapes, but nothing lowers it to StableHLO, and the compile worker (a fresh
process) cannot even unpickle a graph naming an op registered only in the user's
process. (An op with a registered custom-call target, as every ``nki_op`` has, was
replaced by a carrier before this check: ``custom_calls.py``; a mutating custom op is
the op its ``auto_functionalized`` node calls.) Before this check such a graph failed in
the worker as a ``bad-request``; now prepare refuses it as ``custom-op``, naming the
op, and the backend runs the graph
eagerly on the device, where the op runs its own implementation (an ``nki_op``: its
kernels, each charged by its own schedule). PyTorch's own ``torch_nn::`` custom ops are
traced through before this point (``decomp.custom``); the compiler's own ``torchneuron::``
helper ops (``decomp.extremes``, ``decomp.fmod``) are lowered and pass.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchneuron.compiler.errors import PrepareError
from torchneuron.compiler.prepare.mutating_calls import mutable_op_of

__all__ = ["refuse_custom_ops", "refuse_foreign_ops"]

# Namespaces of ops the compiler lowers, traces through or carries (``_ours``)
_KNOWN_NAMESPACES = frozenset({"aten", "prims", "torch_nn", "torchneuron"})


def _ours(qualname: str, opdef: object) -> bool:
    """PyTorch's own custom ops (``prims::``, ``torch_nn::``: defined in ``torch``) and the
    compiler's helpers (``torchneuron::``) are lowered or traced through elsewhere."""
    module = getattr(getattr(opdef, "_init_fn", None), "__module__", "") or ""
    return (qualname.split("::")[0] in ("aten", "prims", "torch_nn", "torchneuron")
            or module == "torch" or module.startswith("torch."))


def refuse_custom_ops(gm: fx.GraphModule) -> None:
    """Raise ``PrepareError(reason="custom-op")`` if a node calls a ``custom_op`` op."""
    from torch._library.custom_ops import OPDEFS

    for node in gm.graph.nodes:
        # (a mutating custom op is the op an ``auto_functionalized`` node calls)
        op = mutable_op_of(node) or node.target
        if node.op != "call_function" or not hasattr(op, "name"):
            continue
        try:
            qualname = op.name()
        except Exception:  # noqa: BLE001 - not an OpOverload
            continue
        opdef = OPDEFS.get(qualname)
        if opdef is not None and not _ours(qualname, opdef):
            raise PrepareError(
                f"{qualname} is a custom op (torch.library.custom_op) with no lowering: the "
                "neuron compiler cannot carry it into an executable, so this graph runs "
                "eagerly on the device, where the op runs its own implementation",
                op=qualname, reason="custom-op")


def refuse_foreign_ops(gm: fx.GraphModule) -> None:
    """Raise ``PrepareError(reason="custom-op")`` before tracing if ``gm`` calls an op of a
    namespace the compiler does not know that ``torch.library.Library.define`` made (not
    a ``custom_op``: those are checked after tracing, by ``refuse_custom_ops``).

    Why before tracing: FSDP2's ``fsdp::`` ops, which adaptive eager records between its
    collectives, failed later and without naming themselves. ``fsdp::chunk_cat`` and
    ``fsdp::split_with_sizes_copy`` write into an ``out`` argument, which
    functionalization refuses ("trace-failed"); ``fsdp::all_gather_copy_in`` writes its
    output buffer with no alias annotation in its schema, traces as if functional, and the
    worker, a fresh process that never imported FSDP, could not unpickle it
    ("bad-request"). Either way every region holding one failed, for good, and FSDP2
    under adaptive eager ran the root module's forward and loss eagerly on more than one
    rank. Named, the refusal is learned by adaptive eager: the op runs between regions
    (``adaptive_eager.refused``), and a ``torch.compile`` graph holding it runs eagerly,
    where the op runs its own implementation."""
    from torch._library.custom_ops import OPDEFS

    from torchneuron.compiler.stablehlo.custom_targets import target_for_op

    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        if target.namespace in _KNOWN_NAMESPACES or target_for_op(target) is not None:
            continue
        qualname = target.name()
        if qualname in OPDEFS:
            continue
        raise PrepareError(
            f"{qualname} is an op of the {target.namespace!r} library, which the neuron "
            "compiler neither lowers nor can load in its worker: this graph runs eagerly "
            "on the device, where the op runs its own implementation",
            op=qualname, reason="custom-op")
