"""``F.multi_margin_loss`` and its gradient, compiled with eager's bits on every CPU path.

PyTorch's Python kernel for the op's Autograd key (its reference) sums a sample's margins
with ATen's reduction, whose order follows the CPU's vector width; eager's CPU kernel
sums them in a loop of its own. Under ``torch.compile`` the loss and its gradient were
off in the last bits (7 of 8 outputs at AVX-512), and a region adaptive eager replayed
was refused by its first-replay check at ``ATEN_CPU_CAPABILITY=default``
(``test_ae_divergence``'s multi_margin case). The op now reaches the table, which keeps
it as eager's kernel (``decomp.autograd_kernels``, ``decomp.eager_kernels``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.compiler.exact import torch_compile_matches_eager


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("shape,p,margin,weighted,reduction", [
    ((3, 4), 1, 1.0, False, "mean"),
    ((5, 7), 2, 0.5, True, "sum"),
    ((6, 33), 1, 1.0, False, "none"),
    ((33,), 1, 1.0, False, "mean"),
])
def test_multi_margin_loss_and_gradient(shape: tuple[int, ...], p: int, margin: float,
                                        weighted: bool, reduction: str) -> None:
    x = _randn(*shape) * 2
    target = torch.randint(0, shape[-1], shape[:-1],
                           generator=torch.Generator().manual_seed(1))
    weight = _randn(shape[-1], seed=2).abs() if weighted else None

    def fn(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        w = None if weight is None else weight.to(x.device)
        return F.multi_margin_loss(x, t, p=p, margin=margin, weight=w, reduction=reduction) * 3

    torch_compile_matches_eager(fn, x, target, grad=True)
