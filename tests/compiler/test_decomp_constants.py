"""Decompositions that build a constant from Python data compile under torch.compile.

``torch.tensor`` inside a decomposition is recorded by AOTAutograd's trace as
``lift_fresh_copy`` + ``detach_``, and AOTAutograd refuses the in-place ``detach_``
("aot_autograd expected to have an entirely functional graph"), so these compiled
functions raised where CPU PyTorch runs: ``histc`` with a range, antialiased bilinear
``interpolate``, ``as_strided_scatter`` and complex division by a real number. The
decompositions now use ``torch.full`` / ``torch.as_tensor``; results are compared with
eager CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401  (registers the backend and device)

CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]] = {
    "histc_range": (lambda t: torch.histc(t * 1.0, 4, 0.0, 2.0),
                    torch.tensor([0.1, 0.7, 0.3, 1.5, 0.95, 0.2, 0.6, 2.0, -0.5])),
    "histc_neg_range": (lambda t: torch.histc(t * 1.0, 3, -1.0, 0.5),
                        torch.tensor([-0.9, 0.7, 0.3, 0.5, -1.0, 0.2])),
    "interpolate_antialias": (
        lambda t: F.interpolate(t, size=(3, 4), mode="bilinear", antialias=True),
        torch.linspace(-1, 1, 60).reshape(1, 2, 5, 6)),
    "as_strided_scatter": (
        lambda t: torch.as_strided_scatter(t, torch.ones(3, device=t.device), (3,), (2,), 1),
        torch.arange(10.0)),
    "complex_div_real": (
        lambda t: torch.view_as_real(torch.view_as_complex(t) / 2.0),
        torch.linspace(-3, 3, 12).reshape(6, 2)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_matches_eager(name: str) -> None:
    fn, x = CASES[name]
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), fn(x), rtol=1e-5, atol=1e-6)
