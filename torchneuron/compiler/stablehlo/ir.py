"""The StableHLO program as plain data: what the simulated Neuron compiler reads.

The dataclasses here are the contract of docs/INTERFACES.md ("compiler IR"). They hold
only JSON-compatible values so an executable can store a program as data (never
pickle) and load it in a process without torch-mlir.

Attribute values (``Operation.attributes``) are represented as follows:

- integers, floats, bools and strings as themselves; non-finite floats as the
  tagged dict ``{"_kind": "float", "value": "inf" | "-inf" | "nan"}``;
- ``array<i64: ...>`` and similar dense arrays as lists;
- StableHLO enums (``#stablehlo<comparison_direction GT>``, precision, ...) as their
  keyword string (``"GT"``);
- StableHLO structured attributes (``#stablehlo.dot<...>``, ``.gather``, ``.scatter``,
  ``.conv``) as dicts keyed by the field names of the StableHLO spec;
- dense tensors (``dense<...>``, ``dense_resource<...>``) as
  ``{"_kind": "dense", "dtype", "shape", "splat": value}`` for splats or
  ``{"_kind": "dense", "dtype", "shape", "hex": raw little-endian bytes}`` otherwise
  (bf16/f16 as raw bits, i1 one byte per element), so constants round-trip exactly;
- anything else as ``{"_kind": "opaque", "text": str(attr)}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TensorType", "Operation", "Function", "Module", "float_to_json", "float_from_json"]


@dataclass(frozen=True)
class TensorType:
    """A ranked tensor type; ``shape`` entries of -1 are dynamic dimensions."""

    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join('?' if d < 0 else str(d) for d in self.shape)}]"

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> TensorType:
        return TensorType(tuple(int(s) for s in d["shape"]), str(d["dtype"]))


@dataclass
class Operation:
    """One StableHLO (or func/arith/chlo) operation in SSA form."""

    name: str
    results: list[str]
    operands: list[str]
    operand_types: list[TensorType]
    result_types: list[TensorType]
    attributes: dict[str, Any] = field(default_factory=dict)
    regions: list[list[Operation]] = field(default_factory=list)
    region_args: list[list[tuple[str, TensorType]]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "results": list(self.results),
            "operands": list(self.operands),
            "operand_types": [t.to_dict() for t in self.operand_types],
            "result_types": [t.to_dict() for t in self.result_types],
            "attributes": self.attributes,
            "regions": [[op.to_dict() for op in region] for region in self.regions],
            "region_args": [[[n, t.to_dict()] for n, t in args] for args in self.region_args],
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Operation:
        return Operation(
            name=d["name"],
            results=list(d["results"]),
            operands=list(d["operands"]),
            operand_types=[TensorType.from_dict(t) for t in d["operand_types"]],
            result_types=[TensorType.from_dict(t) for t in d["result_types"]],
            attributes=d["attributes"],
            regions=[[Operation.from_dict(o) for o in region] for region in d["regions"]],
            region_args=[
                [(str(n), TensorType.from_dict(t)) for n, t in args] for args in d["region_args"]
            ],
        )

    def pretty(self, indent: int = 0) -> str:
        """One line per op, e.g. ``%3: f32[64,512] = stablehlo.add(%1, %2)``."""
        pad = "  " * indent
        lhs = ", ".join(f"%{r}: {t}" for r, t in zip(self.results, self.result_types, strict=False))
        call = f"{self.name}({', '.join('%' + o for o in self.operands)})"
        attrs = ", ".join(f"{k}={_short_attr(v)}" for k, v in self.attributes.items())
        line = f"{pad}{lhs} = {call}" if lhs else f"{pad}{call}"
        if attrs:
            line += " {" + attrs + "}"
        lines = [line]
        for args, region in zip(self.region_args, self.regions, strict=False):
            sig = ", ".join(f"%{n}: {t}" for n, t in args)
            lines.append(f"{pad}  ^({sig}):")
            lines.extend(op.pretty(indent + 2) for op in region)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.pretty()


@dataclass
class Function:
    """A ``func.func``: named arguments, a flat body, and its result types."""

    name: str
    args: list[tuple[str, TensorType]]
    body: list[Operation]
    result_types: list[TensorType]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "args": [[n, t.to_dict()] for n, t in self.args],
            "body": [op.to_dict() for op in self.body],
            "result_types": [t.to_dict() for t in self.result_types],
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Function:
        return Function(
            name=d["name"],
            args=[(str(n), TensorType.from_dict(t)) for n, t in d["args"]],
            body=[Operation.from_dict(o) for o in d["body"]],
            result_types=[TensorType.from_dict(t) for t in d["result_types"]],
        )

    def pretty(self) -> str:
        sig = ", ".join(f"%{n}: {t}" for n, t in self.args)
        res = ", ".join(str(t) for t in self.result_types)
        lines = [f"func {self.name}({sig}) -> ({res}):"]
        lines.extend(op.pretty(1) for op in self.body)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.pretty()


@dataclass
class Module:
    """All functions of a module; ``entry`` is the one ``interpret`` runs."""

    functions: dict[str, Function]
    entry: str = "main"

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "functions": {name: f.to_dict() for name, f in self.functions.items()},
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Module:
        funcs = {str(k): Function.from_dict(v) for k, v in d["functions"].items()}
        return Module(functions=funcs, entry=str(d.get("entry", "main")))

    def pretty(self) -> str:
        return "\n\n".join(f.pretty() for f in self.functions.values())

    def __str__(self) -> str:
        return self.pretty()


def float_to_json(x: float) -> Any:
    """Floats stay floats unless non-finite, which strict JSON cannot hold."""
    if math.isfinite(x):
        return float(x)
    return {"_kind": "float", "value": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def float_from_json(v: Any) -> float:
    if isinstance(v, dict):
        return float(v["value"])
    return float(v)


def _short_attr(v: Any) -> str:
    """Keep printed lines short: dense constants show a summary, not their bytes."""
    if isinstance(v, dict) and v.get("_kind") == "dense":
        shape = "x".join(str(s) for s in v["shape"])
        if "splat" in v:
            return f"dense<{_short_attr(v['splat'])}>:{v['dtype']}[{shape}]"
        return f"dense<{len(v['hex']) // 2} bytes>:{v['dtype']}[{shape}]"
    if isinstance(v, dict) and v.get("_kind") == "float":
        return str(v["value"])
    if isinstance(v, dict) and v.get("_kind") == "opaque":
        return str(v["text"])
    if isinstance(v, dict):
        return "<" + ", ".join(f"{k}={_short_attr(x)}" for k, x in v.items()) + ">"
    if isinstance(v, list):
        return "[" + ", ".join(_short_attr(x) for x in v) + "]"
    return repr(v) if isinstance(v, str) else str(v)
