"""Ops with a CPU kernel and a composite fallback run the CPU kernel on ``neuron``.

Why: for PrivateUse1 the dispatcher took the composite formula of ``silu_backward`` and
``mish_backward``, so gradients through ``F.silu`` / ``F.mish`` differed from CPU's.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401
from torchneuron.dispatch import kernel_over_composite


@pytest.mark.parametrize("fn", [F.silu, F.mish], ids=["silu", "mish"])
def test_gradients_and_double_gradients_match_cpu(fn: object) -> None:
    x = torch.randn(3, 40, generator=torch.Generator().manual_seed(0))
    results = []
    for dev in ("cpu", "neuron"):
        t = x.to(dev).requires_grad_()
        (g,) = torch.autograd.grad(fn(t).sin().sum(), t, create_graph=True)  # type: ignore[operator]
        (gg,) = torch.autograd.grad(g.square().sum(), t)
        results.append((g.detach().cpu(), gg.cpu()))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


def test_the_list_names_every_op_with_a_cpu_kernel_and_a_composite() -> None:
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    found = set()
    for packet_name in dir(torch.ops.aten):
        try:
            packet = getattr(torch.ops.aten, packet_name)
            overloads = packet.overloads()
        except (AttributeError, RuntimeError):
            continue
        for overload in overloads:
            try:
                name = getattr(packet, overload).name()
                both = has(name, "CompositeImplicitAutograd") and has(name, "CPU")
            except (AttributeError, RuntimeError):  # Python-only overloads (aten::__and__.bool)
                continue
            if both:
                found.add(packet_name)
    assert found == set(kernel_over_composite.OPS)
