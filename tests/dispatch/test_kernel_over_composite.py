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


# Ops with both kernels whose composite gives the CPU kernel's values exactly, so the
# device keeps the composite: channel shuffle is a permutation (reshape, permute, copy).
EXACT_COMPOSITES = {"native_channel_shuffle"}


def test_the_list_names_every_op_with_a_cpu_kernel_and_a_composite() -> None:
    """Every registered aten op, not only those ``torch.ops.aten`` has resolved so far
    (``dir(torch.ops.aten)`` grows as ops are used, so it depended on test order)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    found = set()
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("aten::") and has(name, "CompositeImplicitAutograd") \
                and has(name, "CPU"):
            found.add(name.removeprefix("aten::").split(".")[0])
    assert found - EXACT_COMPOSITES == set(kernel_over_composite.OPS)


@pytest.mark.parametrize("groups", [2, 3])
def test_channel_shuffle_keeps_its_exact_composite(groups: int) -> None:
    x = torch.randn(2, 6, 4, 5, generator=torch.Generator().manual_seed(groups))
    assert torch.equal(F.channel_shuffle(x.to("neuron"), groups).cpu(),
                       F.channel_shuffle(x, groups))
