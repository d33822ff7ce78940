"""StableHLO text -> ``Module``, by walking the module with torch-mlir's MLIR bindings.

We let MLIR's own parser read the text (pretty or generic form both work once the
StableHLO dialect is registered) instead of hand-parsing the many pretty syntaxes, then
turn every op into plain data (see ir.py for how attributes are represented).
torch_mlir is imported lazily: only parsing needs it, loading JSON IR does not.
"""

from __future__ import annotations

import re
from typing import Any

from torchneuron.compiler.stablehlo.ir import Function, Module, Operation, TensorType

__all__ = ["StableHLOParseError", "parse_module"]


class StableHLOParseError(ValueError):
    """The text is not a StableHLO module we can read; the message and ``.op`` name the op."""

    def __init__(self, message: str, op: str | None = None) -> None:
        super().__init__(message)
        self.op = op


_RESOURCE_RE = re.compile(r'^\s*"?([^\s":]+)"?\s*:\s*"0x([0-9A-Fa-f]*)"', re.MULTILINE)


def _resources(text: str) -> dict[str, bytes]:
    """Blobs of the trailing ``{-# dialect_resources ... #-}`` section (alignment dropped)."""
    start = text.find("{-#")
    if start < 0:
        return {}
    out = {}
    for m in _RESOURCE_RE.finditer(text, start):
        out[m.group(1)] = bytes.fromhex(m.group(2))[4:]  # first 4 bytes: alignment
    return out


def _where(text: str, message: str) -> tuple[str, str | None]:
    """The source line MLIR's first diagnostic points at, and the op name on it."""
    m = re.search(r'"-":(\d+):\d+', message)
    lines = text.splitlines()
    if m is None or not 0 < int(m.group(1)) <= len(lines):
        return "", None
    line = lines[int(m.group(1)) - 1].strip()
    op = re.search(r'(?:^|=\s*|")([a-z_]+\.[a-z_.]+)', line)
    return f" at line {m.group(1)} ({line[:160]})", op.group(1) if op else None


def parse_module(text: str) -> Module:
    """Parse StableHLO text (as printed by torch-mlir) into a ``Module``."""
    from torch_mlir import ir
    from torch_mlir._mlir_libs import _stablehlo

    ctx = ir.Context()
    _stablehlo.register_dialect(ctx)
    ctx.allow_unregistered_dialects = True
    try:
        mlir_module = ir.Module.parse(text, ctx)
    except Exception as e:  # MLIRError carries the diagnostics with line:col
        where, op_name = _where(text, str(e))
        raise StableHLOParseError(f"MLIR could not parse the module{where}: {e}", op_name) from e
    walker = _Walker(ir, _resources(text))
    functions: dict[str, Function] = {}
    with ctx:
        for op in mlir_module.body.operations:
            op = op.operation
            if op.name != "func.func":
                continue
            fn = walker.function(op)
            functions[fn.name] = fn
    if not functions:
        raise StableHLOParseError("module has no func.func")
    entry = "main" if "main" in functions else next(iter(functions))
    return Module(functions=functions, entry=entry)


class _Walker:
    """Converts one MLIR function at a time; holds the AsmState used to name values."""

    def __init__(self, ir: Any, resources: dict[str, bytes]) -> None:
        self.ir = ir
        self.resources = resources
        self.state: Any = None

    def name(self, value: Any) -> str:
        return str(value.get_name(self.state)).lstrip("%")

    def type(self, t: Any) -> TensorType:
        ir = self.ir
        if isinstance(t, ir.ShapedType) or ir.ShapedType.isinstance(t):
            st = ir.ShapedType(t)
            if not st.has_rank:
                return TensorType((), str(st.element_type))
            shape = tuple(-1 if st.is_dynamic_dim(i) else int(d) for i, d in enumerate(st.shape))
            return TensorType(shape, str(st.element_type))
        return TensorType((), str(t))

    def function(self, op: Any) -> Function:
        ir = self.ir
        self.state = ir.AsmState(op)
        name = ir.StringAttr(op.attributes["sym_name"]).value
        ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        block = op.regions[0].blocks[0]
        args = [(self.name(a), self.type(a.type)) for a in block.arguments]
        body = [self.operation(o.operation) for o in block.operations]
        return Function(name, args, body, [self.type(t) for t in ftype.results])

    def operation(self, op: Any) -> Operation:
        try:
            attrs = {str(k): self.attr(op.attributes[k]) for k in op.attributes.keys()}
            regions, region_args = [], []
            for reg in op.regions:
                blocks = list(reg.blocks)
                if len(blocks) > 1:
                    raise StableHLOParseError("regions with several blocks are not supported")
                if not blocks:
                    regions.append([])
                    region_args.append([])
                    continue
                region_args.append([(self.name(a), self.type(a.type)) for a in blocks[0].arguments])
                regions.append([self.operation(o.operation) for o in blocks[0].operations])
            return Operation(
                name=str(op.name),
                results=[self.name(r) for r in op.results],
                operands=[self.name(v) for v in op.operands],
                operand_types=[self.type(v.type) for v in op.operands],
                result_types=[self.type(r.type) for r in op.results],
                attributes=attrs,
                regions=regions,
                region_args=region_args,
            )
        except StableHLOParseError as e:
            if e.op is not None:
                raise
            raise StableHLOParseError(f"while reading {op.name}: {e}", str(op.name)) from e
        except Exception as e:
            msg = f"while reading {op.name}: {type(e).__name__}: {e}"
            raise StableHLOParseError(msg, str(op.name)) from e

    def attr(self, a: Any) -> Any:
        from torchneuron.compiler.stablehlo import _attrs

        return _attrs.convert(self.ir, a, self.resources, self.type)
