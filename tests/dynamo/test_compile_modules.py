"""nn modules whose training graphs used to fall back to eager (a backward op with no
lowering) now compile, forward and backward, and give CPU's outputs and gradients."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

import torchneuron.compiler as tc

pytestmark = pytest.mark.slow

_CASES: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
    "conv1d_groups": (lambda: torch.nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 9)),
    "conv3d": (lambda: torch.nn.Conv3d(2, 3, 2, dilation=(1, 2, 1)), (2, 2, 4, 5, 4)),
    "conv_transpose2d": (lambda: torch.nn.ConvTranspose2d(3, 4, 3, stride=2, output_padding=1),
                         (2, 3, 4, 5)),
    "avg_pool2d_ceil": (lambda: torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True,
                                                   count_include_pad=False), (2, 3, 6, 7)),
    "lp_pool1d": (lambda: torch.nn.LPPool1d(2, 3, 2), (2, 3, 8)),
    "max_pool3d": (lambda: torch.nn.MaxPool3d(2, 2, 1), (2, 2, 5, 4, 5)),
    "adaptive_avg3d": (lambda: torch.nn.AdaptiveAvgPool3d((2, 3, 2)), (2, 2, 5, 4, 3)),
    "adaptive_max2d": (lambda: torch.nn.AdaptiveMaxPool2d((3, 2)), (2, 3, 7, 5)),
    "replication_pad2d": (lambda: torch.nn.ReplicationPad2d((1, 2, 0, 3)), (2, 3, 4, 5)),
    "fractional_max_pool2d": (lambda: torch.nn.FractionalMaxPool2d(2, output_ratio=0.5),
                              (2, 3, 8, 9)),
    "fractional_max_pool3d": (lambda: torch.nn.FractionalMaxPool3d((2, 2, 3), output_size=3),
                              (2, 2, 5, 6, 7)),
    # inputs with no elements: Dynamo's fake copy of an empty neuron tensor used to fail
    "batch_norm2d_empty_batch": (lambda: torch.nn.BatchNorm2d(3), (0, 3, 4, 4)),
    "layer_norm_empty": (lambda: torch.nn.LayerNorm([2, 0]), (3, 2, 0)),
}


@pytest.mark.parametrize("name", list(_CASES))
def test_module_trains_compiled_like_cpu(name: str) -> None:
    build, shape = _CASES[name]
    torch._dynamo.reset()
    tc.reset_stats()
    torch.manual_seed(0)
    cpu = build()
    dev = copy.deepcopy(cpu).to("neuron")
    x = torch.randn(*shape, requires_grad=True)
    xd = x.detach().to("neuron").requires_grad_()
    torch.manual_seed(1)  # the same draws (fractional pooling's offsets) in both runs
    want = cpu(x)
    torch.manual_seed(1)
    got = torch.compile(dev, backend="neuron")(xd)
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    g = torch.randn_like(want)
    want.backward(g)
    got.backward(g.to("neuron"))
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    for (n, p), (_, q) in zip(cpu.named_parameters(), dev.named_parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=n)
    s = tc.stats()
    assert s["failures"] == 0 and s["compilations"] == 2, tc.explain()


@pytest.mark.parametrize("batch", [False, True], ids=["1d", "2d"])
@pytest.mark.parametrize("reduction", ["none", "mean"])
@pytest.mark.parametrize("used", [False, True], ids=["returned", "used_in_graph"])
def test_multilabel_margin_loss_gives_eagers_shape_and_values(reduction: str, used: bool,
                                                              batch: bool) -> None:
    """Rows that end early (a -1): PyTorch's traced decomposition counted the positions
    after it. A 1-d input: PyTorch's meta kernel gives shape [1] where eager gives a 0-d
    loss; a returned loss is compiled with eager's shape, one that the graph uses further
    (traced with shape [1]) runs eagerly, counted. Eager's values and gradients always."""
    loss = torch.nn.MultiLabelMarginLoss(reduction=reduction)

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return loss(a, b) * 2 if used else loss(a, b)

    torch.manual_seed(0)
    y = torch.tensor([[3, 0, -1, 1], [1, -1, 0, 0], [0, 1, 2, 3]] if batch else [3, 0, -1, 1])
    x = torch.randn(y.shape, requires_grad=True)
    xn = x.detach().to("neuron").requires_grad_()
    torch._dynamo.reset()
    tc.reset_stats()
    out = torch.compile(fn, backend="neuron")(xn, y.to("neuron"))
    want = fn(x, y)
    assert out.shape == want.shape
    torch.testing.assert_close(out.cpu(), want)
    out.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), x.grad)
    refused = used and not batch
    s = tc.stats()
    assert s["failures"] == refused, tc.explain()
    assert s["compilations"] == (0 if refused else 2), tc.explain()
