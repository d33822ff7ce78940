"""float16/bfloat16 convolutions run eagerly (decomp_half_conv.py): eager's bits depend on
the CPU's kernel, so compiling them refuses (reason ``half-conv``), torch.compile and
adaptive eager give eager's bits by running eager's own kernel, and float32 still
compiles."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401  (the neuron device and backend)
from torchneuron import adaptive_eager
from torchneuron.compiler import CompileError, compile_graph

CASES = {
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), (4, 6, 9, 9), (5, 6, 3, 3)),
    "depthwise": (lambda x, w, b: F.conv2d(x, w, b, groups=6), (4, 6, 9, 9), (6, 1, 3, 3)),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, stride=2), (4, 6, 17), (5, 6, 3)),
    "conv3d": (lambda x, w, b: F.conv3d(x, w, b), (2, 3, 5, 5, 5), (4, 3, 2, 2, 2)),
    "transposed": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2),
                   (2, 6, 5, 5), (6, 4, 3, 3)),
}


def _inputs(case: str, dtype: torch.dtype) -> list[torch.Tensor]:
    _, xs, ws = CASES[case]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(xs, generator=g).to(dtype)
    w = torch.randn(ws, generator=g).to(dtype)
    b = torch.randn(ws[1] if case == "transposed" else ws[0], generator=g).to(dtype)
    return [x, w, b]


@pytest.mark.same_on_every_cpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_half_conv_is_refused_and_torch_compile_gives_eagers_bits(case: str,
                                                                  dtype: torch.dtype) -> None:
    fn = CASES[case][0]
    xs = _inputs(case, dtype)
    with pytest.raises(CompileError) as err:
        compile_graph(fn, xs)
    assert err.value.reason == "half-conv"
    want = fn(*xs)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(*[t.to("neuron") for t in xs]).cpu()
    assert torch.equal(got, want), f"{int((got != want).sum())} of {want.numel()} differ"


def test_half_conv_training_gradients_equal_eagers() -> None:
    torch.manual_seed(0)
    cpu = torch.nn.Conv2d(3, 4, 3).to(torch.bfloat16)
    dev = torch.nn.Conv2d(3, 4, 3).to(torch.bfloat16).to("neuron")
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(2, 3, 8, 8, dtype=torch.bfloat16, requires_grad=True)
    xd = x.detach().to("neuron").requires_grad_()
    torch._dynamo.reset()
    torch.compile(dev, backend="neuron")(xd).square().sum().backward()
    cpu(x).square().sum().backward()
    assert torch.equal(xd.grad.cpu(), x.grad)
    assert torch.equal(dev.weight.grad.cpu(), cpu.weight.grad)


@pytest.mark.same_on_every_cpu
def test_float32_conv_still_compiles() -> None:
    x, w, b = _inputs("conv2d", torch.float32)
    (got,) = compile_graph(CASES["conv2d"][0], [x, w, b]).run([x, w, b])
    torch.testing.assert_close(got, CASES["conv2d"][0](x, w, b))


def test_adaptive_eager_runs_half_conv_between_regions() -> None:
    """A bfloat16 CNN step: the convolution is learned as refused and runs eagerly between
    regions; parameters equal eager's bit for bit."""
    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
                                   torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4))

    def train(model: torch.nn.Module, device: str) -> torch.nn.Module:
        model = model.to(torch.bfloat16).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        for _ in range(8):
            x = torch.randn(4, 3, 8, 8, generator=g).to(torch.bfloat16).to(device)
            loss = model(x).float().square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        return model

    want = train(make(), "cpu")
    adaptive_eager.enable()
    try:
        got = train(make(), "neuron")
        torch.neuron.synchronize()
        stats = adaptive_eager.stats()
    finally:
        adaptive_eager.disable()
    for p, q in zip(got.parameters(), want.parameters(), strict=True):
        assert torch.equal(p.cpu(), q)
    assert stats["refused_ops"].get("aten.convolution.default") == "half-conv", stats
