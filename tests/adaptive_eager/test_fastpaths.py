"""The recorder's and the guard's fast paths give exactly what the general code gives.

Recording and replaying pay per op for describing the arguments, and each fast path
(a flat loop instead of the recursive ``describe``, a remembered region key) must be
indistinguishable from the general one: same descriptions, same templates, same keys.
"""

from __future__ import annotations

import pytest
import torch

import torchneuron  # noqa: F401
from torchneuron.adaptive_eager import signature
from torchneuron.adaptive_eager.recorder import static_of
from torchneuron.adaptive_eager.signature import Unsupported, describe, rebuild, region_key


def _args() -> list[tuple[tuple, dict]]:
    x = torch.randn(3, 4, device="neuron")
    y = torch.randn(4, 3, device="neuron").t()
    return [
        ((x, y), {}),
        ((x, x), {}),  # the same tensor twice
        ((x, 1.0), {"alpha": -0.0}),  # -0.0 stays apart from 0.0
        ((x, float("nan"), float("inf")), {}),
        ((x, 2, True, None, "mean"), {}),  # int, bool, None, str
        (([x, y], [y, x], 0.5), {"alpha": 1}),  # flat tensor lists (foreach ops)
        ((x, [1, 2], (3, 4)), {"keepdim": False}),  # int lists and tuples
        ((x, []), {}),
        ((x,), {"dtype": torch.float16, "device": torch.device("neuron", 0)}),
        ((x,), {"memory_format": torch.contiguous_format, "layout": torch.strided}),
        (((x, (y, 2)),), {}),  # nested deeper than one level
        (([x, [y]],), {}),
        (({"a": x},), {}),
        (([x, 1.5, None],), {}),
    ]


@pytest.mark.parametrize("case", range(len(_args())))
def test_static_of_is_describe(case: int) -> None:
    args, kwargs = _args()[case]
    general: list[torch.Tensor] = []
    desc, template = describe((args, kwargs), general)
    (static, grad, autocast), fast_template, fast = static_of(torch.ops.aten.add.Tensor, args, kwargs)
    assert static == desc
    assert repr(static) == repr(desc)  # what region keys are made of
    assert (grad, autocast) == (torch.is_grad_enabled(), torch.is_autocast_enabled())
    assert len(fast) == len(general) and all(a is b for a, b in zip(fast, general, strict=True))
    assert repr(rebuild(fast_template, fast)) == repr(rebuild(template, general))
    assert repr(rebuild(fast_template, fast)) == repr((args, kwargs))


def test_static_of_refuses_host_tensors_like_describe() -> None:
    x = torch.randn(2, device="neuron")
    for args in [(x, torch.ones(2)), ([x, torch.ones(2)],)]:
        with pytest.raises(Unsupported):
            describe((args, {}), [])
        with pytest.raises(Unsupported):
            static_of(torch.ops.aten.add.Tensor, args, {})


def test_static_of_sees_grad_mode() -> None:
    x = torch.randn(2, device="neuron")
    with torch.no_grad():
        assert static_of(torch.ops.aten.neg.default, (x,), {})[0][1] is False
    assert static_of(torch.ops.aten.neg.default, (x,), {})[0][1] is True


def test_region_key_is_remembered_and_stable() -> None:
    x = torch.randn(2, device="neuron")
    sig = (torch.ops.aten.neg.default,
           static_of(torch.ops.aten.neg.default, (x,), {})[0] + ("single",), (("x", 0),), ())
    key = region_key((sig,))
    signature._region_keys.clear()
    assert region_key((sig,)) == key  # computed again: the same
    other = (sig[0], sig[1][:1] + (False,) + sig[1][2:], sig[2], sig[3])  # grad mode off
    assert region_key((other,)) != key
