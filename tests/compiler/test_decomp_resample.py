"""Antialiased bilinear resizing compiles (it had no lowering) and matches eager
(decomp_resample): down- and upsampling, align_corners, explicit scales, sizes from scale
factors, and ``F.interpolate(antialias=True)`` as users call it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.compiled import assert_compiles_to_eager

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
def test_antialiased_bilinear_matches_eager(name: str) -> None:
    x = torch.randn(2, 3, 10, 20, generator=torch.Generator().manual_seed(1))
    assert_compiles_to_eager(_CASES[name], [x], rtol=1e-5, atol=1e-5, name=name)
