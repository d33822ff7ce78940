"""Cache keys: what determines an executable, hashed the same way in every process.

- ``executable_key``: sha256 over the StableHLO text, the compiler version, the
  executable-format version, the hardware target and the compiler options, plus the
  signature prepare gave the graph (write-backs, aliasing outputs). Nothing
  process-dependent goes in: the graph's name (``forward_3`` counts graphs in this
  process) is not part of the StableHLO text nor of the program, and the cached bytes
  are stored under a neutral name.
- ``index_key``: sha256 over a caller's graph key plus everything besides the graph
  that shapes the lowering (versions of the compiler, torch and torch-mlir, what eager
  answers on this CPU where the lowering asks it (``host_numerics``), target, options),
  so an index entry made by another release, toolchain or CPU is never followed.
- ``fx_graph_key``: a caller's graph key for an FX graph: each node's op, target,
  arguments and metadata, the placeholders' shapes/strides/dtypes, and the bytes of any
  tensor constant. It refuses (returns None: compile without the index) when the
  graph calls a module or a Python function other than torch ops and operators (state
  it could close over is not in the text), or when the text would hold an object
  address, which differs between processes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from torchneuron.compiler import versions

__all__ = ["executable_key", "index_key", "fx_graph_key", "toolchain"]

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=1)
def toolchain() -> dict[str, str]:
    """Versions of the libraries the lowering runs through (they shape the StableHLO)."""
    try:
        mlir = metadata.version("torch-mlir")
    except metadata.PackageNotFoundError:
        mlir = "absent"
    from torchneuron.compiler.decomp import host_numerics

    # what eager computes on this CPU, as far as the lowering asked it (host_numerics): an
    # index entry made on a machine whose eager answers differently is not followed here
    host = json.dumps(host_numerics.fingerprint(), sort_keys=True)
    return {"torch": torch.__version__, "torch_mlir": mlir,
            "host_numerics": hashlib.sha256(host.encode()).hexdigest()[:16]}


def executable_key(stablehlo: str, target: str, options: dict[str, Any],
                   signature: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """(key, components): the executable's cache key and every ingredient of it.

    ``signature`` is what prepare decided beside the program (write-backs into inputs,
    outputs that alias inputs, random inputs): two graphs can lower to the same
    StableHLO and differ there, so it is part of the key.
    """
    sig = {k: v for k, v in (signature or {}).items() if k != "num_stablehlo_ops"}
    components = {
        "stablehlo_sha256": hashlib.sha256(stablehlo.encode("utf-8")).hexdigest(),
        "signature_sha256": _digest(sig),
        "compiler_version": versions.COMPILER_VERSION,
        "format_version": versions.FORMAT_VERSION,
        "target": target,
        "options": options,
    }
    return _digest(components), components


def index_key(graph_key: str, target: str, options: dict[str, Any]) -> str:
    """The index entry for ``graph_key`` under this compiler, toolchain, target and options."""
    return _digest({
        "graph_key": graph_key,
        "compiler_version": versions.COMPILER_VERSION,
        "format_version": versions.FORMAT_VERSION,
        "toolchain": toolchain(),
        "target": target,
        "options": options,
    })


def _spec(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return [list(v.shape), list(v.stride()), v.storage_offset(), str(v.dtype),
                v.device.type, v.requires_grad]
    return repr(v)


def _target_name(target: Any) -> str:
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    return f"{module}.{name}" if name else str(target)


def _arg(a: Any) -> str:
    if isinstance(a, fx.Node):
        return f"%{a.name}"
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(_arg(x) for x in a) + "]"
    if isinstance(a, dict):
        return "{" + ", ".join(f"{k!r}: {_arg(v)}" for k, v in a.items()) + "}"
    if isinstance(a, torch.Tensor):  # repr elides the middle of large tensors
        return f"tensor({_spec(a)}, {_tensor_digest(a)})"
    return repr(a)


def _tensor_digest(t: torch.Tensor) -> str:
    # Backends are called under AOTAutograd's active fake mode; a constant is real data.
    with unset_fake_temporarily():
        flat = t.detach().cpu().contiguous().reshape(-1)
        raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return f"{flat.dtype}:{hashlib.sha256(raw).hexdigest()}"


def _constant_digest(gm: fx.GraphModule, target: str) -> str | None:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return _tensor_digest(obj) if isinstance(obj, torch.Tensor) else None


_PURE_MODULES = ("_operator", "operator", "builtins", "math")


def _keyable_target(target: Any) -> bool:
    """Ops whose meaning is their name: torch ops and Python's operators. A Python
    function in the graph could close over state the key would not see."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return True
    return getattr(target, "__module__", None) in _PURE_MODULES


def fx_graph_key(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
    """A graph key for ``gm`` called with ``example_inputs``; None if it cannot be stable."""
    lines = ["inputs " + json.dumps([_spec(v) for v in example_inputs])]
    for n in gm.graph.nodes:
        if n.op == "call_module" or (n.op == "call_function" and not _keyable_target(n.target)):
            return None
        val = n.meta.get("val")
        line = f"{n.op} %{n.name} {_target_name(n.target)}({_arg(n.args)}, {_arg(n.kwargs)})"
        if isinstance(val, torch.Tensor):
            line += f" : {val.dtype}{list(val.shape)}"
        if n.op == "get_attr":
            digest = _constant_digest(gm, str(n.target))
            if digest is None:  # a submodule or subgraph: its contents are not in the text
                return None
            line += " = " + digest
        lines.append(line)
    text = "\n".join(lines)
    if _ADDRESS.search(text):
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
