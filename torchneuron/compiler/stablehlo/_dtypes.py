"""StableHLO element types <-> torch dtypes, and dense constants <-> tensors.

Dense constants are kept as raw little-endian bytes (hex) so that every dtype,
including bf16 and NaN payloads, round-trips bit-exactly through JSON.
"""

from __future__ import annotations

from typing import Any

import torch

from torchneuron.compiler.stablehlo.ir import TensorType, float_from_json, float_to_json

__all__ = ["TORCH_DTYPES", "torch_dtype", "stablehlo_dtype", "dense_to_tensor", "tensor_to_dense"]

TORCH_DTYPES: dict[str, torch.dtype] = {
    "f64": torch.float64,
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i1": torch.bool,
    "i8": torch.int8,
    "i16": torch.int16,
    "i32": torch.int32,
    "i64": torch.int64,
    "si8": torch.int8,
    "si16": torch.int16,
    "si32": torch.int32,
    "si64": torch.int64,
    "ui8": torch.uint8,
    "ui16": torch.uint16,
    "ui32": torch.uint32,
    "ui64": torch.uint64,
    "f8E4M3FN": torch.float8_e4m3fn,
    "f8E5M2": torch.float8_e5m2,
    "complex<f32>": torch.complex64,
    "complex<f64>": torch.complex128,
}
_BACK: dict[torch.dtype, str] = {}
for _name, _dt in TORCH_DTYPES.items():
    _BACK.setdefault(_dt, _name)

UNSIGNED = {"ui8", "ui16", "ui32", "ui64"}


def torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype for a StableHLO element type; raises for unknown types."""
    try:
        return TORCH_DTYPES[dtype]
    except KeyError:
        raise NotImplementedError(f"StableHLO element type {dtype!r} has no torch dtype") from None


def stablehlo_dtype(dtype: torch.dtype) -> str:
    return _BACK[dtype]


def _static(shape: list[int] | tuple[int, ...]) -> list[int]:
    return [int(s) for s in shape]


def dense_to_tensor(d: dict[str, Any]) -> torch.Tensor:
    """Materialize a ``{"_kind": "dense", ...}`` attribute as a CPU tensor."""
    dt = torch_dtype(d["dtype"])
    shape = _static(d["shape"])
    if "splat" in d:
        v = d["splat"]
        value: Any = bool(v) if dt == torch.bool else v
        if dt.is_floating_point:
            value = float_from_json(v)
        return torch.full(shape, value, dtype=dt)
    raw = bytearray.fromhex(d["hex"])
    if len(raw) == 0:
        return torch.empty(shape, dtype=dt)
    t = torch.frombuffer(raw, dtype=torch.uint8)
    if dt == torch.bool:
        return (t != 0).reshape(shape)
    return t.view(dt).reshape(shape).clone()


def tensor_to_dense(t: torch.Tensor, tt: TensorType | None = None) -> dict[str, Any]:
    """Encode a tensor as a dense attribute (the inverse of ``dense_to_tensor``)."""
    dtype = tt.dtype if tt is not None else stablehlo_dtype(t.dtype)
    shape = list(tt.shape) if tt is not None else list(t.shape)
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bool:
        raw = t.to(torch.uint8).numpy().tobytes()
    else:
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    return {"_kind": "dense", "dtype": dtype, "shape": shape, "hex": raw.hex()}


def splat_dense(value: Any, dtype: str, shape: list[int]) -> dict[str, Any]:
    """A splat constant: one JSON value stands for every element."""
    if isinstance(value, float):
        value = float_to_json(value)
    return {"_kind": "dense", "dtype": dtype, "shape": shape, "splat": value}
