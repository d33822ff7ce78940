"""Moving a module to ``neuron`` inside ``torch.inference_mode()`` works as on the CPU.

Why: under inference mode the autograd keys are excluded, so composite ops that
normally never reach the device (``_has_compatible_shallow_copy_type``, which
``Module._apply`` asks for every parameter) arrive at the op handler; run on the
buffers they saw a CPU and a neuron tensor and raised a mixed-device error.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchneuron


def _model(dev: str) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU()).eval().to(dev)


def test_module_to_neuron_inside_inference_mode() -> None:
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        ref = _model("cpu")(x)
        model = _model("neuron")
        out = model(x.to("neuron"))
        assert all(p.device.type == "neuron" for p in model.parameters())
        assert torch.equal(ref, out.cpu())
        assert model.to("cpu")[0].weight.device.type == "cpu"


def test_shallow_copy_type_answers_as_on_the_cpu() -> None:
    pairs = [(torch.ones(2, device="neuron"), torch.ones(2)), (torch.ones(2), torch.ones(2, device="neuron"))]
    outside = [torch._has_compatible_shallow_copy_type(a, b) for a, b in pairs]
    with torch.inference_mode():
        inside = [torch._has_compatible_shallow_copy_type(a, b) for a, b in pairs]
    assert inside == outside == [False, False]


def test_module_to_neuron_inside_inference_mode_under_adaptive_eager() -> None:
    """Adaptive eager's dispatch mode hands ops to eager dispatch directly."""
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    with torchneuron.adaptive_eager.enabled(), torch.inference_mode():
        ref = _model("cpu")(x)
        out = _model("neuron")(x.to("neuron"))
        assert torch.equal(ref, out.cpu())


def test_views_of_normal_tensors_inside_inference_mode() -> None:
    """Inside ``torch.inference_mode()``, a view of a tensor made outside it is a normal
    tensor sharing its base's version counter, as on the CPU. Every view op on such a
    neuron tensor (``x[..., None]``, ``view``, ``t``, slicing) raised "Cannot set
    version_counter for inference tensor": the new wrapper was made in inference mode."""
    def run(dev: str) -> list[object]:
        y = torch.arange(6.0, device=dev).reshape(2, 3)
        mask = torch.tensor([[True, False, True]], device=dev)
        with torch.inference_mode():
            views = [y[..., None], y.view(3, 2), y.t(), y[1:], mask[..., None]]
            fresh = y * 2
            out = fresh.view(6).masked_fill(mask.repeat(1, 2).view(6), 0.0)
        views[1].add_(1)  # writes through to y, bumping the shared version counter
        return ([v.is_inference() for v in views] + [fresh.is_inference(), y._version]
                + [t.cpu().tolist() for t in (*views, out, y)])

    assert run("neuron") == run("cpu")


_COMPOSITES = {
    "reshape": lambda w: w.reshape(12), "flatten": lambda w: w.flatten(),
    "mT": lambda w: w.mT, "T": lambda w: w.T, "view_as": lambda w: w.view_as(w),
    "expand_as": lambda w: w.expand_as(w), "unflatten": lambda w: w.unflatten(1, (2, 2)),
    "swapaxes": lambda w: w.swapaxes(0, 1), "movedim": lambda w: w.movedim(0, 1),
    "to_double": lambda w: w.double(), "contiguous_copy": lambda w: w.t().contiguous(),
    "contiguous_self": lambda w: w.contiguous(), "narrow": lambda w: w.narrow(0, 0, 1),
}


@pytest.mark.parametrize("op", list(_COMPOSITES), ids=list(_COMPOSITES))
@pytest.mark.parametrize("base", ["leaf", "parameter", "non-leaf"])
def test_composite_views_of_requires_grad_tensors_inside_inference_mode(op: str, base: str) -> None:
    """A composite op that can return a view (``reshape``, ``mT``, ``to``, ``contiguous``)
    reaches the device whole under inference mode (its autograd-key decomposition is
    skipped). Run whole, ``w.reshape(12)`` was no view and did not require grad, where
    the CPU's is a view that does (and whose backward reaches nothing); ``w.double()``
    was no inference tensor, where the CPU's is one."""
    def run(dev: str) -> tuple:
        w0 = torch.arange(12.0, device=dev).view(3, 4)
        w0 = nn.Parameter(w0) if base == "parameter" else w0.requires_grad_()
        w = w0 * 1 if base == "non-leaf" else w0
        with torch.inference_mode():
            v = _COMPOSITES[op](w)
            inside = (v.requires_grad, v.is_inference(), v._is_view(), v.is_leaf, v.dtype)
        try:
            v.sum().backward()
            after: tuple = ("backward ran", None if w0.grad is None else w0.grad.cpu().tolist())
        except RuntimeError as e:
            after = ("raised", str(e))
        return inside, v.requires_grad, v.cpu().tolist(), after

    assert run("neuron") == run("cpu")
