"""MLIR attribute -> JSON-compatible python value (the encoding is documented in ir.py).

Structured StableHLO attributes are read through the accessors that torch-mlir's
``_stablehlo`` extension exposes; dense tensors through numpy's buffer protocol, or
from their printed form when numpy has no matching dtype (bf16).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

from torchneuron.compiler.stablehlo._dtypes import splat_dense, tensor_to_dense, torch_dtype
from torchneuron.compiler.stablehlo.ir import TensorType, float_to_json

_ENUMS = (
    "ComparisonDirectionAttr",
    "ComparisonTypeAttr",
    "PrecisionAttr",
    "TransposeAttr",
    "RngAlgorithmAttr",
    "RngDistributionAttr",
    "FftTypeAttr",
)
_STRUCTS = {
    "DotDimensionNumbers": (
        "lhs_batching_dimensions",
        "rhs_batching_dimensions",
        "lhs_contracting_dimensions",
        "rhs_contracting_dimensions",
    ),
    "GatherDimensionNumbers": (
        "offset_dims",
        "collapsed_slice_dims",
        "operand_batching_dims",
        "start_indices_batching_dims",
        "start_index_map",
        "index_vector_dim",
    ),
    "ScatterDimensionNumbers": (
        "update_window_dims",
        "inserted_window_dims",
        "input_batching_dims",
        "scatter_indices_batching_dims",
        "scattered_dims_to_operand_dims",
        "index_vector_dim",
    ),
    "ConvDimensionNumbers": (
        "input_batch_dimension",
        "input_feature_dimension",
        "input_spatial_dimensions",
        "kernel_input_feature_dimension",
        "kernel_output_feature_dimension",
        "kernel_spatial_dimensions",
        "output_batch_dimension",
        "output_feature_dimension",
        "output_spatial_dimensions",
    ),
    "DotAlgorithm": (
        "lhs_precision_type",
        "rhs_precision_type",
        "accumulation_type",
        "lhs_component_count",
        "rhs_component_count",
        "num_primitive_operations",
        "allow_imprecise_accumulation",
    ),
}
_ARRAYS = (
    "DenseI64ArrayAttr",
    "DenseI32ArrayAttr",
    "DenseI16ArrayAttr",
    "DenseI8ArrayAttr",
    "DenseBoolArrayAttr",
    "DenseF32ArrayAttr",
    "DenseF64ArrayAttr",
)


def _plain(v: Any) -> Any:
    """Field values of structured attrs: lists of ints, ints, or type objects."""
    if isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return float_to_json(v)
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


def convert(
    ir: Any, a: Any, resources: dict[str, bytes], to_type: Callable[[Any], TensorType]
) -> Any:
    """Convert one attribute; unknown kinds become ``{"_kind": "opaque", "text": ...}``."""
    from torch_mlir._mlir_libs import _stablehlo as shlo

    if isinstance(a, ir.BoolAttr):
        return bool(a.value)
    if isinstance(a, ir.IntegerAttr):
        return int(a.value)
    if isinstance(a, ir.FloatAttr):
        return float_to_json(float(a.value))
    if isinstance(a, ir.StringAttr):
        return str(a.value)
    if isinstance(a, ir.UnitAttr):
        return True
    for cls in _ARRAYS:
        klass = getattr(ir, cls, None)
        if klass is not None and isinstance(a, klass):
            return [_plain(x) for x in a]
    if isinstance(a, ir.ArrayAttr):
        return [convert(ir, x, resources, to_type) for x in a]
    if isinstance(a, ir.DictAttr):
        return {x.name: convert(ir, x.attr, resources, to_type) for x in a}
    if isinstance(a, ir.DenseResourceElementsAttr) or str(a).startswith("dense_resource<"):
        return _resource(a, resources, to_type(a.type))
    if isinstance(a, ir.DenseElementsAttr):
        return _dense(ir, a, to_type(a.type))
    for cls in _ENUMS:
        klass = getattr(shlo, cls, None)
        if klass is not None and klass.isinstance(a):
            return str(klass(a).value)
    for cls, fields in _STRUCTS.items():
        klass = getattr(shlo, cls, None)
        if klass is not None and klass.isinstance(a):
            obj = klass(a)
            return {f: _plain(getattr(obj, f)) for f in fields}
    if isinstance(a, ir.TypeAttr):
        return {"_kind": "type", "text": str(a.value)}
    return {"_kind": "opaque", "text": str(a)}


def _resource(a: Any, resources: dict[str, bytes], tt: TensorType) -> dict[str, Any]:
    text = str(a)
    m = re.match(r"dense_resource<\"?([^\">]+)\"?>", text)
    if m is None or m.group(1) not in resources:
        raise ValueError(f"dense_resource blob not found in the module text: {text[:80]}")
    raw = resources[m.group(1)]
    if tt.dtype == "i1":
        raw = bytes(1 if b else 0 for b in raw)
    return {"_kind": "dense", "dtype": tt.dtype, "shape": list(tt.shape), "hex": raw.hex()}


def _dense(ir: Any, a: Any, tt: TensorType) -> dict[str, Any]:
    shape = list(tt.shape)
    if a.is_splat:
        v = a.get_splat_value()
        if tt.dtype == "i1":
            return splat_dense(bool(ir.IntegerAttr(v).value), tt.dtype, shape)
        if isinstance(v, ir.IntegerAttr):
            value = int(v.value)
            if tt.dtype.startswith("ui") and value < 0:
                value += 1 << int(tt.dtype[2:])
            return splat_dense(value, tt.dtype, shape)
        if isinstance(v, ir.FloatAttr):
            return splat_dense(float(v.value), tt.dtype, shape)
    try:
        import numpy as np

        arr = np.array(a)
        t = torch.from_numpy(arr.copy()).to(torch_dtype(tt.dtype))
    except Exception:
        t = _dense_from_text(str(a), tt)
    return tensor_to_dense(t.reshape(shape), tt)


_TOKEN_RE = re.compile(r"0x[0-9A-Fa-f]+|true|false|[-+]?(?:inf|nan|[0-9.]+(?:[eE][-+]?[0-9]+)?)")


def _dense_from_text(text: str, tt: TensorType) -> torch.Tensor:
    """Read ``dense<...>`` as printed by MLIR (lists, a hex blob, or hex elements)."""
    dt = torch_dtype(tt.dtype)
    inner = text[
        text.index("<") + 1 : text.rindex(">", 0, text.rindex(" : ") if " : " in text else None)
    ]
    inner = inner.strip()
    numel = 1
    for s in tt.shape:
        numel *= s
    if inner.startswith('"0x'):
        raw = bytearray.fromhex(inner[3:-1])
        flat = torch.frombuffer(raw, dtype=torch.uint8)
        if dt != torch.bool:
            flat = flat.view(dt)
        else:
            flat = flat != 0
        if flat.numel() == 1 and numel != 1:
            flat = flat.expand(numel)
        return flat.clone().reshape(tt.shape)
    tokens = _TOKEN_RE.findall(inner)
    bits_dtype = {2: torch.int16, 4: torch.int32, 8: torch.int64}
    values = []
    for tok in tokens:
        if tok.startswith("0x") and dt.is_floating_point:
            bits = torch.tensor([int(tok, 16)], dtype=torch.int64)
            size = torch.empty((), dtype=dt).element_size()
            bits = bits.to(torch.uint8 if size == 1 else bits_dtype[size])
            values.append(bits.view(dt).to(torch.float64).item())
        elif tok in ("true", "false"):
            values.append(tok == "true")
        else:
            values.append(float(tok) if dt.is_floating_point else int(tok, 0))
    t = torch.tensor(values, dtype=torch.float64 if dt.is_floating_point else None)
    if t.numel() == 1 and numel != 1:
        t = t.expand(numel)
    return t.to(dt).reshape(tt.shape)
