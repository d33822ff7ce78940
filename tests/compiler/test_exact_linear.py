"""``nn.Linear`` and ``nn.LayerNorm`` compiled give eager's bits (issue 22).

Each was a wrong number on the code before:

- a linear layer's bias add was a separate rounding after the matrix product, where
  eager hands the bias to MKL's ``gemm`` to accumulate onto: from a contraction of 256
  on, 30 to 60% of the outputs differed (decomp/fused_bias.py, collapse/addmm_bias.py);
- its backward multiplied by a contiguous copy of the saved ``w.t()`` transposed back,
  a transposed operand where eager's is the contiguous ``w``, and BLAS's other kernel
  gave other bits (194 of 512 input-gradient elements at batch 2, 256 -> 4);
- ``native_layer_norm`` summed a row's moments in another order than eager's vector
  loop (1333 of 4096 outputs), and its backward when the input needs no gradient;
- with them every gradient of the bench zoo's residual MLP step.

The bits are compared with eager CPU on this machine, whatever its CPU; the file is
rerun at every other CPU capability by test_bits_per_cpu_capability.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchneuron
from tests.compiler.exact import bits_equal, torch_compile_matches_eager
from torchneuron import adaptive_eager
from torchneuron.bench.zoo.mlp import ResidualMLP
from torchneuron.hardware.settings import override


def _randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("shape,dtype", [
    ((32, 256, 128), torch.float32), ((32, 256, 128), torch.float64),
    ((32, 256, 128), torch.bfloat16), ((2, 256, 4), torch.float32),
    ((2, 256, 4), torch.float64), ((8, 512, 10), torch.float32)])
def test_linear_forward_and_gradients_are_eagers_bits(shape: tuple[int, int, int],
                                                      dtype: torch.dtype) -> None:
    b, i, o = shape
    x, w, bias = _randn(b, i, dtype=dtype), _randn(o, i, dtype=dtype, seed=1) * 0.1, \
        _randn(o, dtype=dtype, seed=2)
    torch_compile_matches_eager(lambda x, w, bias: F.linear(x, w, bias).square(), x, w, bias,
                                grad=True)


def test_a_users_own_bias_add_keeps_eagers_two_roundings() -> None:
    """Unmarked, ``x @ w.t() + b`` is two ops in eager too: not run as ``addmm``.

    The sample is the first contraction length at which this CPU's ``gemm`` gives
    ``addmm`` other bits than the product and the add: MKL's kernels differ by CPU (on
    an AMD EPYC a contraction of 256 tells them apart; on an Intel Xeon with AVX-512 FP16
    both forms agree there, at every MKL and oneDNN level, and differ from 512 on)."""
    for k in (256, 1024, 4096):
        x, w, bias = _randn(32, k), _randn(128, k, seed=1), _randn(128, seed=2)
        if not torch.equal(x @ w.t() + bias, torch.addmm(bias, x, w.t())):
            break
    else:
        pytest.skip("this CPU's gemm gives addmm the product-then-add bits at every "
                    "contraction tried: no sample tells the two forms apart")
    torch_compile_matches_eager(lambda x, w, bias: x @ w.t() + bias, x, w, bias)


def _step_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                compiled: bool) -> list[torch.Tensor]:
    def loss(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(a), b)

    torch._dynamo.reset()
    (torch.compile(loss, backend="neuron") if compiled else loss)(x, y).backward()
    return [p.grad.cpu() for p in model.parameters()]


@pytest.mark.parametrize("name", ["layer_norm_first", "residual_mlp"])
def test_training_step_gradients_are_eagers_bits(name: str) -> None:
    """A layer norm whose input needs no gradient (its backward's masked outputs), and
    the bench zoo's residual MLP (LayerNorm, Linear, GELU, Linear, cross-entropy)."""
    def make() -> nn.Module:
        torch.manual_seed(0)
        if name == "layer_norm_first":
            return nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 10))
        return ResidualMLP()

    x, y = _randn(32, 64, seed=3), torch.randint(0, 10, (32,), generator=torch.Generator())
    want = _step_grads(make(), x, y, compiled=False)
    got = _step_grads(make().to("neuron"), x.to("neuron"), y.to("neuron"), compiled=True)
    for (n, _), g, w in zip(make().named_parameters(), got, want, strict=True):
        bits_equal(g, w, f"gradient of {n}")


def test_adaptive_eager_replays_a_linear_layers_step_with_eagers_bits() -> None:
    """SGD steps of a wide linear layer replay as programs, every step eager's bits."""
    def run(device: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(256, 128), nn.LayerNorm(128), nn.Linear(128, 4)).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        x, y = _randn(2, 256, seed=4).to(device), torch.arange(2).to(device)
        losses = []
        for _ in range(8):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.detach().cpu())
        return losses + [p.detach().cpu() for p in m.parameters()]

    want = run("cpu")
    torchneuron.reset()  # refusals learned by earlier tests in this process
    adaptive_eager.enable()
    try:  # every region pays and replays its program
        with override(ae_min_gain_ns=-1, ae_first_tier=False):
            got = run("neuron")
        stats = adaptive_eager.stats()
    finally:
        adaptive_eager.disable()
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        bits_equal(g, w, f"value {i}")
    assert stats["replays"] - stats["first_tier_replays"] > 0, stats
