"""NKI dtypes, and which dtypes each engine accepts.

Why torch dtypes: the interpreter computes with CPU torch tensors, which (unlike numpy)
have bfloat16 and the two float8 formats, so ``nl.bfloat16 is torch.bfloat16``.
NeuronCores have no 64-bit datapath: float64 / int64 are refused at the kernel's
boundary with a hint to cast first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from torchneuron.hardware import dtype_name

from .errors import NKIError

__all__ = ["ENGINE_DTYPES", "as_dtype", "check_engine_dtype", "cost_dtype"]

_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_FLOAT = (torch.float32, torch.bfloat16, torch.float16, *_FP8)
_INT = (torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)

# What each engine's datapath reads (NKI "Supported Data Types"; TensorE: fp8, bf16,
# fp16, tf32/fp32 inputs and fp32 accumulation only).
ENGINE_DTYPES: dict[str, tuple[torch.dtype, ...]] = {
    "tensor": _FLOAT,
    "vector": _FLOAT + _INT,
    "scalar": _FLOAT + _INT,
    "gpsimd": _FLOAT + _INT,
    "dma": _FLOAT + _INT,
}
_ENGINE_NAMES = {"tensor": "TensorE", "vector": "VectorE", "scalar": "ScalarE",
                 "gpsimd": "GpSimd", "dma": "DMA"}


def as_dtype(d: Any) -> torch.dtype:
    """A torch dtype from a torch or numpy dtype (or the name of one)."""
    if isinstance(d, torch.dtype):
        return d
    if isinstance(d, str) and hasattr(torch, d):
        return getattr(torch, d)
    return torch.from_numpy(np.zeros(0, dtype=d)).dtype


def check_engine_dtype(api: str, engine: str, *dtypes: torch.dtype) -> None:
    """Raise ``NKIError`` if ``engine`` cannot read one of ``dtypes``."""
    ok = ENGINE_DTYPES[engine]
    for d in dtypes:
        if d not in ok:
            names = ", ".join(str(x).replace("torch.", "") for x in ok)
            raise NKIError(
                api, f"{_ENGINE_NAMES[engine]} reads {names}",
                f"an operand has dtype {str(d).replace('torch.', '')}",
                "Cast in PyTorch before the kernel (NeuronCores have no 64-bit datapath)"
                if d in (torch.float64, torch.int64) else "Convert with nisa.tensor_copy(dtype=...)")


def cost_dtype(d: torch.dtype) -> str:
    """The dtype name the hardware cost model keys matmul rates on ("bf16", "f8E4M3FN")."""
    return dtype_name(d)
