"""Antialiased bilinear resizing is eager's own kernel inside the program
(decomp/eager_kernels): eager's bits differ between CPU code paths, and the matrix
lowering that was here matched them only within tolerance (a replay-sweep MISMATCH,
issue 22); it was then refused. Every form (down- and upsampling, align_corners,
explicit scales, sizes from scale factors, ``F.interpolate(antialias=True)`` as users
call it) now compiles to eager's bits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from torchneuron.compiler import compile_graph

aten = torch.ops.aten

_CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "down": lambda x: aten._upsample_bilinear2d_aa(x, [3, 7], False),
    "up": lambda x: aten._upsample_bilinear2d_aa(x, [13, 31], False),
    "align-corners": lambda x: aten._upsample_bilinear2d_aa(x, [4, 6], True),
    "one-pixel": lambda x: aten._upsample_bilinear2d_aa(x, [1, 1], True),
    "scales": lambda x: aten._upsample_bilinear2d_aa(x, [3, 3], False, 1.7, 0.9),
    "scale-factors": lambda x: aten._upsample_bilinear2d_aa.vec(x, None, False, [0.33, 2.5]),
    "interpolate": lambda x: F.interpolate(x, size=(5, 9), mode="bilinear", antialias=True),
    "interpolate-scale": lambda x: F.interpolate(x, scale_factor=0.45, mode="bilinear",
                                                 antialias=True, align_corners=True),
}


@pytest.mark.parametrize("name", list(_CASES))
def test_antialiased_bilinear_compiles_to_eagers_bits(name: str) -> None:
    x = torch.randn(2, 3, 10, 20, generator=torch.Generator().manual_seed(1))
    [got] = compile_graph(_CASES[name], [x], name=name).run([x])
    assert torch.equal(got, _CASES[name](x))
