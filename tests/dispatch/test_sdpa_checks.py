"""``F.scaled_dot_product_attention`` on ``neuron`` raises where the CPU raises.

Why: the CPU's backend choice checks the inputs (a 1-d ``attn_mask`` raises IndexError);
PrivateUse1 went straight to the math path and broadcast the mask into numbers. Valid
inputs keep the device's results, with gradients, under inference_mode and compiled.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401

_G = torch.Generator().manual_seed(0)
Q, K, V = (torch.randn(2, 3, n, 8, generator=_G) for n in (5, 6, 6))
BAD_MASKS = {
    "bool_1d": torch.tensor([True, False, True, True, False, True]),
    "float_1d": torch.randn(6, generator=_G),
}


def _error(fn: Callable[[], object]) -> tuple[type, str]:
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value).splitlines()[0]


def _sdpa(dev: str, mask: torch.Tensor) -> Callable[[], object]:
    return lambda: F.scaled_dot_product_attention(Q.to(dev), K.to(dev), V.to(dev),
                                                  attn_mask=mask.to(dev))


@pytest.mark.parametrize("name", BAD_MASKS)
def test_1d_mask_raises_cpus_error(name: str) -> None:
    want = _error(_sdpa("cpu", BAD_MASKS[name]))
    assert _error(_sdpa("neuron", BAD_MASKS[name])) == want
    with torch.inference_mode():
        assert _error(_sdpa("neuron", BAD_MASKS[name])) == want


@pytest.mark.parametrize("name", BAD_MASKS)
def test_1d_mask_raises_cpus_error_under_torch_compile(name: str) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    errors = []
    for dev, backend in (("cpu", "eager"), ("neuron", "neuron")):
        torch._dynamo.reset()
        args = [t.to(dev) for t in (Q, K, V, BAD_MASKS[name])]
        errors.append(_error(lambda b=backend, a=args: torch.compile(fn, backend=b)(*a)))
    assert errors[0][0] is errors[1][0] and errors[0][1] == errors[1][1]


VALID = {
    "no_mask": {},
    "bool_2d": {"attn_mask": torch.rand(5, 6, generator=_G) > 0.3},
    "float_4d": {"attn_mask": torch.randn(2, 1, 5, 6, generator=_G)},
    "causal": {"is_causal": True},
    "scale": {"scale": 0.5},
}


@pytest.mark.parametrize("name", VALID)
def test_valid_inputs_still_run_with_gradients(name: str) -> None:
    kw = {k: v.to("neuron") if isinstance(v, torch.Tensor) else v for k, v in VALID[name].items()}
    q, k, v = (t.to("neuron").requires_grad_() for t in (Q, K, V))
    out = F.scaled_dot_product_attention(q, k, v, **kw)
    out.sum().backward()
    cpu_kw = VALID[name]
    qc, kc, vc = (t.clone().requires_grad_() for t in (Q, K, V))
    want = F.scaled_dot_product_attention(qc, kc, vc, **cpu_kw)
    want.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), want.detach())
    for d, c in ((q, qc), (k, kc), (v, vc)):
        torch.testing.assert_close(d.grad.cpu(), c.grad)
    with torch.inference_mode():
        again = F.scaled_dot_product_attention(*(t.to("neuron") for t in (Q, K, V)), **kw)
    torch.testing.assert_close(again.cpu(), want.detach())
