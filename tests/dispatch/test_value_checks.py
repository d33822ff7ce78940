"""``F.one_hot`` on ``neuron`` raises CPU's errors for classes out of range.

Why: PyTorch's one_hot checks the classes only on the CPU; for PrivateUse1 it computes
``t.unsqueeze(-1) == arange(n)``, so a bad class gave a row of zeros silently
(``dispatch/value_checks.py``).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

import torchneuron

_MODES = {
    "eager": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
    "adaptive_eager": torchneuron.adaptive_eager.enabled,
}


def _outcome(classes: list[int], num_classes: int, dev: str, mode: str) -> tuple:
    with _MODES[mode]():
        try:
            out = F.one_hot(torch.tensor(classes).to(dev), num_classes)
            return ("ok", out.dtype, out.cpu().tolist())
        except RuntimeError as e:
            return ("raised", str(e))


@pytest.mark.parametrize("mode", list(_MODES))
@pytest.mark.parametrize(("classes", "num_classes"), [
    ([0, 5], 3), ([0, 3], 3), ([0, -1], 3), ([2, -1], -1), ([0, 2, 1], 3), ([[1, 0], [2, 2]], -1),
    ([], 3), ([], 0), ([], -2),
])
def test_one_hot_values_and_errors_as_cpu(classes: list, num_classes: int, mode: str) -> None:
    assert _outcome(classes, num_classes, "neuron", mode) == _outcome(classes, num_classes, "cpu", mode)


def test_one_hot_in_a_repeated_step_under_adaptive_eager() -> None:
    """A training-like loop whose labels go through one_hot replays as eager computes it;
    a bad label in a later step still raises CPU's error."""
    logits = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    ref = [(logits * F.one_hot(torch.tensor([i % 3, 1, 2, 0]), 3)).sum() for i in range(8)]
    with torchneuron.adaptive_eager.enabled():
        x = logits.to("neuron")
        got = [(x * F.one_hot(torch.tensor([i % 3, 1, 2, 0]).to("neuron"), 3)).sum().item()
               for i in range(8)]
        with pytest.raises(RuntimeError, match="smaller than num_classes"):
            (x * F.one_hot(torch.tensor([3, 1, 2, 0]).to("neuron"), 3)).sum().item()
    assert got == [r.item() for r in ref]


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.uint8])
@pytest.mark.parametrize("num_classes", [3, -1])
def test_one_hot_of_other_dtypes_raises_as_cpu(dtype: torch.dtype, num_classes: int) -> None:
    def run(dev: str) -> tuple:
        try:
            return ("ok", F.one_hot(torch.tensor([1, 2], dtype=dtype).to(dev), num_classes).cpu())
        except RuntimeError as e:
            return ("raised", str(e))

    assert run("neuron") == run("cpu")
