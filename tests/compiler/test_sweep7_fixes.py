"""Wrong results the sweeps of issue 22 found on the code of sweep 7, each against eager CPU.

- ``native_batch_norm_backward`` as eager's kernel in the program
  (``decomp/eager_kernels``) with an ``output_mask`` that leaves out the weight's and the
  bias's gradients: every BatchNorm without affine parameters and every InstanceNorm in
  training (the ModuleInfo replay sweep: ``nn.BatchNorm1d``'s ``3d_input_not_affine``,
  ``nn.InstanceNorm1d``'s default, ...) failed its region's run ("zip() argument 2 is
  shorter than argument 1"): the call computed all three gradients where the graph
  declares the input's only. PyTorch's fake gives the input's gradient even when the
  mask leaves it out (a BatchNorm on an input that needs no gradient), the kernel
  gives None there; so the call computes the input's gradient always, and the others as
  the mask says.

Compiled as one graph (``exact.cases_match_eager``); the file is rerun at every other CPU
capability by test_bits_per_cpu_capability.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tests.compiler.exact import cases_match_eager

aten = torch.ops.aten

# name -> (affine, output_mask, the outputs eager gives for that mask)
_MASKS = {
    "affine_all": (True, [True, True, True], (0, 1, 2)),
    "affine_input_only": (True, [True, False, False], (0,)),
    "not_affine_input_only": (False, [True, False, False], (0,)),
    "affine_params_only": (True, [False, True, True], (1, 2)),
    "affine_input_and_weight": (True, [True, True, False], (0, 1)),
    "not_affine_input_and_bias": (False, [True, False, True], (0, 2)),
}


def _case(affine: bool, mask: list[bool], picked: tuple[int, ...]) -> Callable[..., Any]:
    def case(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor,
             invstd: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = aten.native_batch_norm_backward.default(
            dy, x, w if affine else None, None, None, mean, invstd, True, 1e-5, mask)
        return tuple(out[i] for i in picked)

    return case


def test_batch_norm_backward_with_a_partial_output_mask_gives_eagers_bits() -> None:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(4, 3, 5, generator=g)
    dy = torch.randn(4, 3, 5, generator=g)
    w = torch.rand(3, generator=g) + 0.5
    mean = x.mean((0, 2))
    invstd = (x.var((0, 2), unbiased=False) + 1e-5).rsqrt()
    cases_match_eager({n: _case(*c) for n, c in _MASKS.items()}, dy, x, w, mean, invstd)
