"""Eval-mode batch norm compiled = eager CPU (decomp_batch_norm_eval.py).

Found by tools/special_sweep.py: running_var + eps == 0 gave +-inf where eager gives NaN
(eager folds the statistics into x * alpha + beta), and float16/bfloat16 differed by
several ulps (bit for bit now; float32/float64 within tolerance).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401  (the neuron device and backend)

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _compiled(fn, *args):
    torch._dynamo.reset()
    out = torch.compile(fn, backend="neuron")(*[a.to("neuron") if isinstance(a, torch.Tensor)
                                                 else a for a in args])
    return out.cpu()


def _check(want: torch.Tensor, got: torch.Tensor) -> None:
    """NaN and inf positions exact; half types bit for bit; float32/float64 within
    tolerance (eager's fused multiply-add is not reproduced there)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan())
    keep = ~want.isnan()
    assert torch.equal(got[keep].isinf(), want[keep].isinf())
    if want.dtype in (torch.float16, torch.bfloat16):
        assert torch.equal(got[keep], want[keep])
        assert torch.equal(got[keep].signbit(), want[keep].signbit())
    else:
        torch.testing.assert_close(got, want, equal_nan=True)


def _inputs(dtype: torch.dtype, shape=(3, 4, 5, 6)):
    g = torch.Generator().manual_seed(0)
    c = shape[1]
    x = (torch.randn(shape, generator=g) * 4).to(dtype)
    mean = torch.randn(c, generator=g).to(dtype)
    var = (torch.rand(c, generator=g) * 3).to(dtype)
    w = torch.randn(c, generator=g).to(dtype)
    b = torch.randn(c, generator=g).to(dtype)
    return x, mean, var, w, b


@pytest.mark.parametrize("dtype", DTYPES)
def test_eval_bits(dtype: torch.dtype) -> None:
    x, mean, var, w, b = _inputs(dtype, (16, 8, 16, 16))

    def fn(x, m, v, w, b):
        return F.batch_norm(x, m, v, w, b, training=False, eps=1e-5)

    _check(fn(x, mean, var, w, b), _compiled(fn, x, mean, var, w, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_eval_degenerate_variance(dtype: torch.dtype) -> None:
    """running_var + eps == 0: eager's alpha is +-inf, x * alpha + beta NaN or inf."""
    x, mean, var, w, b = _inputs(dtype, (3, 2, 3, 4))
    var = torch.tensor([-0.5, 1.0], dtype=dtype)

    def fn(x, m, v, w, b):
        return F.batch_norm(x, m, v, w, b, training=False, eps=0.5)

    want = fn(x, mean, var, w, b)
    assert want.isnan().any() and want.isinf().any()
    _check(want, _compiled(fn, x, mean, var, w, b))


def test_eval_no_affine_2d() -> None:
    x, mean, var, _, _ = _inputs(torch.float32, (7, 5))

    def fn(x, m, v):
        return F.batch_norm(x, m, v, training=False, eps=1e-3)

    _check(fn(x, mean, var), _compiled(fn, x, mean, var))


def test_eval_module_channels_last() -> None:
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(4)
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2)
        bn.weight.normal_()
        bn.bias.normal_()
    bn.eval()
    x = torch.randn(2, 4, 5, 5).to(memory_format=torch.channels_last)
    with torch.no_grad():
        want = bn(x)
    dev = copy.deepcopy(bn).to("neuron")
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(dev, backend="neuron")(x.to("neuron")).cpu()
    _check(want, got)


def test_training_unchanged() -> None:
    """Training mode keeps the previous entry: running stats updated as eager."""
    x, mean, var, w, b = _inputs(torch.float32)

    def fn(x, m, v, w, b):
        return F.batch_norm(x, m, v, w, b, training=True, momentum=0.3, eps=1e-5), m, v

    want = fn(x, mean.clone(), var.clone(), w, b)
    torch._dynamo.reset()
    m, v = mean.to("neuron"), var.to("neuron")
    got = torch.compile(fn, backend="neuron")(x.to("neuron"), m, v, w.to("neuron"),
                                              b.to("neuron"))
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a.cpu(), e)


@pytest.mark.parametrize("shape", [(5, 5, 5), (16, 8, 7, 7), (4, 3)])
def test_float16_training_bits(shape) -> None:
    """float16 training: eager rounds the batch statistics to float16 before folding them
    (decomp_half_batch_norm.py); output and saved statistics bit for bit, running
    statistics within tolerance."""
    x, mean, var, w, b = _inputs(torch.float16, shape)

    def fn(x, m, v, w, b):
        return torch.native_batch_norm(x, w, b, m, v, True, 0.5, 0.6), m, v

    (wo, wm, wi), wrm, wrv = fn(x, mean.clone(), var.clone(), w, b)
    torch._dynamo.reset()
    (go, gm, gi), grm, grv = torch.compile(fn, backend="neuron")(
        x.to("neuron"), mean.to("neuron"), var.to("neuron"), w.to("neuron"), b.to("neuron"))
    for want, got in ((wo, go), (wm, gm), (wi, gi)):
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    torch.testing.assert_close(grm.cpu(), wrm)
    torch.testing.assert_close(grv.cpu(), wrv)


def test_float16_instance_norm_bits() -> None:
    x = _inputs(torch.float16, (4, 6, 5, 5))[0]

    def fn(x):
        return torch.nn.functional.instance_norm(x)

    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(x.to("neuron")).cpu()
    assert torch.equal(got, fn(x))


def test_cnn_training_step_is_eagers_bits() -> None:
    """The bench zoo's CNN (Conv, BatchNorm in training, ReLU, max-pool, cross-entropy):
    the batch statistics were summed in another order than eager's vector loop, and the
    running means and every gradient differed in the last bits (413 of 432 elements of
    conv1's weight gradient); batch norm is eager's own kernel now (decomp/eager_kernels)."""
    from torchneuron.bench.zoo.cnn import ConvNet

    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)

    def step(device: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        m = ConvNet().to(device)
        fn = lambda a, b: F.cross_entropy(m(a), b)  # noqa: E731
        torch._dynamo.reset()
        loss = (torch.compile(fn, backend="neuron") if device == "neuron" else fn)(
            x.to(device), y.to(device))
        loss.backward()
        return [loss.detach().cpu(), *(p.grad.cpu() for p in m.parameters()),
                *(b.cpu() for b in m.buffers())]

    for i, (got, want) in enumerate(zip(step("neuron"), step("cpu"), strict=True)):
        assert torch.equal(got, want), f"value {i}: {int((got != want).sum())} differ"
