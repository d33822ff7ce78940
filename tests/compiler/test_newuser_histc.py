"""``torch.histc`` with an explicit range compiles under torch.compile and gives eager's
counts. Its decomposition built the range with ``torch.tensor``, which AOTAutograd's trace
records as ``lift_fresh_copy`` + ``detach_``: the compile failed with "aot_autograd
expected to have an entirely functional graph" where CPU PyTorch runs."""

from __future__ import annotations

import pytest
import torch

import torchneuron  # noqa: F401  (registers the backend and device)


@pytest.mark.parametrize("lo_hi", [(0.0, 2.0), (0.0, 0.0), (-1.0, 0.5)])
def test_compiled_histc_matches_eager(lo_hi: tuple[float, float]) -> None:
    x = torch.tensor([0.1, 0.7, 0.3, 1.5, 0.95, 0.2, 0.6, 2.0, -0.5])

    def fn(t: torch.Tensor) -> torch.Tensor:
        return torch.histc(t * 1.0, 4, *lo_hi)

    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(x.to("neuron"))
    assert torch.equal(got.cpu(), fn(x))
