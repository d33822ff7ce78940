"""``torch.autocast("neuron")``: PyTorch's accelerator autocast policy, CPU's numbers.

Why these checks: autocast used to fail on every op. Each test runs the same code under
neuron autocast and under CPU autocast (or, for ops whose policy differs between
PyTorch's CPU list and its accelerator list, on CPU with the casts that policy makes)
and compares dtypes and values; the policy table is compared with the ops PyTorch's
own accelerator autocast registers; and the simulated clock must see the bf16 work.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import torchneuron
from torchneuron.dispatch import reset_op_tracking
from torchneuron.dispatch.autocast import POLICIES

NEURON = torch.device("neuron")
BF16 = torch.bfloat16


def _pair(*shape: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape))).to(dtype)
    return x, x.to(NEURON)


def test_autocast_is_available_and_casts_matmuls() -> None:
    assert torch.amp.is_autocast_available("neuron")
    (a, an), (b, bn) = _pair(4, 6), _pair(6, 3)
    with torch.autocast("neuron", dtype=BF16):
        out = an @ bn
        assert torch.is_autocast_enabled("neuron")
    with torch.autocast("cpu", dtype=BF16):
        ref = a @ b
    assert out.dtype == ref.dtype == BF16 and out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0)


def test_policy_table_is_pytorchs_accelerator_list() -> None:
    """Every op PyTorch's CUDA autocast has a kernel for, except cuDNN's own, and no more."""
    cuda = {
        name.split("::")[1] for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::")
        and torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCUDA")
    }  # fmt: skip
    assert set(POLICIES) == cuda - {"cudnn_convolution", "cudnn_convolution_transpose"}
    for name in POLICIES:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}",
                                                              "AutocastPrivateUse1")


class _Net(nn.Module):
    """Convolution, batch norm, linears, a matmul, activations, pooling: the ops on which
    PyTorch's CPU and accelerator autocast lists agree (LayerNorm, softmax and sums are
    cast differently by the two lists: see ``POLICY_CASES``)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        h = F.gelu(self.fc1(h.flatten(1)))
        return self.fc2(h @ torch.eye(32, device=h.device, dtype=h.dtype))


@pytest.mark.parametrize("dtype", [BF16, torch.float16])
def test_training_step_matches_cpu_autocast(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    cpu = _Net()
    dev = copy.deepcopy(cpu).to(NEURON)
    x, xn = _pair(4, 3, 8, 8)
    target = torch.randint(0, 10, (4,))
    results = []
    for model, inp, tgt, kind in ((cpu, x, target, "cpu"), (dev, xn, target.to(NEURON), "neuron")):
        with torch.autocast(kind, dtype=dtype):
            logits = model(inp)
            loss = F.mse_loss(logits, F.one_hot(tgt, 10).to(logits.dtype))
        loss.backward()
        results.append([logits, loss, *(p.grad for p in model.parameters())])
    for c, n in zip(*results, strict=True):
        assert n.dtype == c.dtype and n.device.type == "neuron"
        torch.testing.assert_close(n.cpu(), c, rtol=0, atol=0)
    assert results[1][0].dtype == dtype and results[1][1].dtype == torch.float32


# Ops whose policy PyTorch's accelerator list fixes; the reference is the CPU op on the
# inputs cast as that policy casts them (CPU's own autocast list differs for some).
POLICY_CASES = [
    ("linear", lambda x, w: F.linear(x, w), BF16),
    ("bmm", lambda x, w: torch.bmm(x.unsqueeze(0), w.t().unsqueeze(0)), BF16),
    ("exp", lambda x, w: torch.exp(x), torch.float32),
    ("layer_norm", lambda x, w: F.layer_norm(x, (x.shape[-1],)), torch.float32),
    ("mse_loss", lambda x, w: F.mse_loss(x, x.flip(0)), torch.float32),
    ("softmax", lambda x, w: torch.softmax(x, -1), torch.float32),
    ("sum", lambda x, w: x.sum(), torch.float32),
    ("cumsum", lambda x, w: x.cumsum(0), torch.float32),
    ("norm", lambda x, w: torch.norm(x), torch.float32),
    ("norm_dim", lambda x, w: torch.norm(x, 2, [1]), torch.float32),
    ("addcmul", lambda x, w: torch.addcmul(x, x, w[: x.shape[0]]), torch.float32),
]
# cross_entropy is not on the accelerator list: its log_softmax keeps the input's dtype
# (an explicit dtype argument), then nll_loss runs in float32; CPU's list has it in fp32
_TARGET = torch.tensor([1, 0, 3, 5, 2])
POLICY_CASES.append((
    "cross_entropy",
    lambda x, w: F.cross_entropy(x, _TARGET.to(x.device))
    if x.device.type == "neuron" else F.nll_loss(torch.log_softmax(x, 1).float(), _TARGET),
    BF16,
))  # fmt: skip


@pytest.mark.parametrize(("name", "fn", "compute"), POLICY_CASES, ids=[c[0] for c in POLICY_CASES])
def test_each_policy_casts_like_pytorch(name: str, fn, compute: torch.dtype) -> None:  # noqa: ANN001
    (x, xn), (w, wn) = _pair(5, 6, dtype=BF16), _pair(5, 6)  # a bf16 activation, an fp32 weight
    with torch.autocast("neuron", dtype=BF16):
        out = fn(xn, wn)
    ref = fn(x.to(compute), w.to(compute))
    assert out.dtype == ref.dtype, name
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0)


def test_cpu_tensors_and_float64_are_left_alone() -> None:
    a, an = _pair(3, 3, dtype=torch.float64)
    with torch.autocast("neuron", dtype=BF16):
        assert (an @ an).dtype == torch.float64
        assert (a.float() @ a.float()).dtype == torch.float32  # CPU autocast is off


def test_binary_cross_entropy_is_refused_like_pytorch() -> None:
    """The accelerator list bans it (CPU's list runs it in fp32)."""
    p = torch.rand(4, device=NEURON)
    with torch.autocast("neuron", dtype=BF16), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(p, p)
    F.binary_cross_entropy(p, p)  # fine outside autocast


def test_weight_casts_are_cached_within_a_region() -> None:
    lin = nn.Linear(8, 8).to(NEURON)
    x = torch.randn(2, 8, device=NEURON)
    reset_op_tracking()
    with torch.autocast("neuron", dtype=BF16):
        for _ in range(3):
            lin(x)
    # one cast of the weight and of the bias for the region, one of x per call
    assert torchneuron.executed_ops()["_to_copy"] == 2 + 3


def test_simulated_time_sees_the_bf16_matmul(fresh_cores: None) -> None:
    a = torch.randn(1024, 1024, device=NEURON)
    b = torch.randn(1024, 1024, device=NEURON)
    a @ b  # warm the eager-compile cache of both signatures (fp32, and autocast's
    with torch.autocast("neuron", dtype=BF16):  # casts and bf16 matmul: 6 s of CPU each)
        a @ b

    def timed(autocast: bool) -> float:
        start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        torch.neuron.synchronize()
        start.record()
        with torch.autocast("neuron", dtype=BF16, enabled=autocast):
            out = a @ b
        end.record()
        end.synchronize()
        assert out.dtype == (BF16 if autocast else torch.float32)
        return start.elapsed_time(end)

    fp32_ms, bf16_ms = timed(False), timed(True)
    # TensorE runs fp32 4x slower than bf16; the casts of both inputs are charged too
    assert bf16_ms < fp32_ms, (bf16_ms, fp32_ms)
